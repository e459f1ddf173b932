"""impyard gc: the retention limits on a hand-built data root, with a fake clock and engine.

Runs, manifests, refs, kept checkouts and volumes are made by hand (no Docker): each
test checks gc removes exactly what the limits let go, and never an unfinished run, a
run a live process owns, or a ref younger than its limit.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pygit2
import pytest

from impyard.box.docker.engine import EngineUnreachableError
from impyard.box.launcher.helpers import LeftHelper
from impyard.common.errors import NotFoundError
from impyard.common.names import utc_epoch
from impyard.gateway.provenance.archive import Archive
from impyard.home import Home
from impyard.journal.log import Journal
from impyard.knowledge.checkouts import runspace
from impyard.knowledge.checkouts.checkout_record import Checkout
from impyard.knowledge.checkouts.runspace import RunSpace
from impyard.knowledge.integration.lane import candidate_ref
from impyard.knowledge.integration.quarantine import quarantine_ref
from impyard.knowledge.store import fold
from impyard.knowledge.store.repo import main_commit
from impyard.policy.compile import deploy
from impyard.queue import namespaces, tasks
from impyard.queue.db import opened
from impyard.retention import objects as retained_objects
from impyard.retention.apply import gc_lock, run_gc
from impyard.retention.model import GcBusyError, GcResult
from impyard.retention.periodic import PeriodicGc
from impyard.retention.volumes import EngineVolume
from impyard.runs.records import manifest as manifests
from impyard.runs.records.model import Manifest
from impyard.runs.records.owner import RunOwnership
from tests.helpers.cli import Cli, json_lines
from tests.helpers.repo import assert_fsck_clean, make_imp, namespace, run_id

NOW = utc_epoch("2026-08-01T00:00:00Z") or 0.0
DAY = 86400.0
NO_ENGINE = {"DOCKER_HOST": "tcp://127.0.0.1:9"}  # nothing listens: refused at once


def stamp(days_ago: float) -> str:
    return datetime.fromtimestamp(NOW - days_ago * DAY, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def set_retention(home: Home, **values: float) -> None:
    text = home.org_policy.read_text()
    for key, value in values.items():
        text, count = re.subn(rf"(?m)^#? ?{key} = [\d.]+$", f"{key} = {value}", text)
        assert count == 1, key
    home.org_policy.write_text(text)
    deploy(home)


class FakeVolumes:
    def __init__(
        self,
        volumes: list[EngineVolume] | None = None,
        *,
        down: bool = False,
        helpers: list[LeftHelper] | None = None,
    ) -> None:
        self.volumes = {v.name: v for v in volumes or []}
        self.down = down
        self.removed: list[str] = []
        self.helpers = list(helpers or [])

    def left_helpers(self, root: Path) -> list[LeftHelper]:
        if self.down:
            raise EngineUnreachableError("unix:///fake.sock", "connection refused")
        return list(self.helpers)

    def remove_helper(self, left: LeftHelper) -> None:
        self.helpers = [h for h in self.helpers if h.name != left.name]
        self.removed.append(left.name)

    def labelled(self) -> list[EngineVolume]:
        if self.down:
            raise EngineUnreachableError("unix:///fake.sock", "connection refused")
        return list(self.volumes.values())

    def remove(self, name: str) -> None:
        if name not in self.volumes:
            raise NotFoundError(f"no such volume {name}")
        del self.volumes[name]
        self.removed.append(name)


class Yard:
    """A data root with imp ``yuko`` and runs written by hand."""

    def __init__(self, tmp_path: Path) -> None:
        self.home, self.repo = make_imp(tmp_path)
        self.main = main_commit(self.repo)
        self.count = 0

    def run(
        self,
        *,
        ended: float | None,
        state: str = "finished",
        checkpoint: str = "integrated",
        refs: tuple[str, ...] = (),
        kept: bool = False,
    ) -> str:
        self.count += 1
        run = run_id(self.count)
        run_dir = self.home.run_dir(run)
        run_dir.mkdir(parents=True)
        (run_dir / "box.log").write_text("box output\n")
        manifest = Manifest(
            run_id=run,
            imp="yuko",
            task_id=None,
            channel=None,
            mode="append",
            base_commit=self.main,
            namespace=namespace(self.count),
            created_at=stamp(100 if ended is None else ended + 0.01),
        )
        manifest.state = state  # type: ignore[assignment]
        manifest.checkpoint = checkpoint  # type: ignore[assignment]
        manifest.ended_at = None if ended is None else stamp(ended)
        if kept:
            manifest.space, manifest.checkout = self.kept_checkout(run)
        for kind in refs:
            name = quarantine_ref(run) if kind == "quarantine" else candidate_ref(run)
            self.repo.references.create(name, pygit2.Oid(hex=self.main))
        manifests.write(self.home, manifest)
        return run

    def kept_checkout(self, run: str) -> tuple[RunSpace, Checkout]:
        """What a quarantined run keeps: its space image, the checkout in it, its record."""
        space = RunSpace("loop", self.home.run_space(run), self.home.run_space_image(run), 2**20)
        space.image.write_bytes(b"\0" * 4096)  # type: ignore[union-attr]
        checkout = Checkout(kind="copy", base=self.main, root=self.home.run_checkout(run))
        (checkout.root / "records" / "a").mkdir(parents=True)
        (checkout.root / "records" / "a" / "x.md").write_text("left behind\n")
        self.home.run_checkout_record(run).write_text(
            json.dumps({"imp": "yuko", **checkout.to_dict()})
        )
        return space, checkout

    def refs(self) -> set[str]:
        return {n for n in self.repo.references if n.startswith(("refs/quarantine/", "refs/cand"))}

    def old_commit(self, days_ago: float) -> pygit2.Oid:
        when = int(NOW - days_ago * DAY)
        sig = pygit2.Signature("Impyard", "impyard@localhost", when, 0)
        tree = self.repo.revparse_single(self.main).peel(pygit2.Commit).tree
        return self.repo.create_commit(None, sig, sig, "old", tree.id, [pygit2.Oid(hex=self.main)])


@pytest.fixture
def yard(tmp_path: Path) -> Yard:
    return Yard(tmp_path)


def removed(result: GcResult) -> set[tuple[str, str]]:
    return {(o.item.kind, o.item.id) for o in result.with_status("removed")}


def planned(result: GcResult) -> set[tuple[str, str]]:
    return {(item.kind, item.id) for item in result.plan.items}


def snapshot(home: Home) -> dict[str, bytes | None]:
    """Every path under the data root (file contents), and every ref of yuko."""
    out: dict[str, bytes | None] = {}
    for dirpath, dirs, files in os.walk(home.root):
        for name in dirs:
            out[os.path.relpath(os.path.join(dirpath, name), home.root)] = None
        for name in files:
            path = os.path.join(dirpath, name)
            out[os.path.relpath(path, home.root)] = Path(path).read_bytes()
    return out


@pytest.fixture
def world(yard: Yard) -> Iterator[tuple[Yard, dict[str, str]]]:
    """One run of every case. Limits: quarantine 45 days, candidate 20, run record 30 (a
    quarantine may outlive its run's record limit, and then keeps the record)."""
    set_retention(yard.home, quarantine_days=45, candidate_days=20, finished_run_days=30)
    runs = {
        "old_quarantine": yard.run(
            ended=50, checkpoint="quarantined", refs=("quarantine",), kept=True
        ),
        "quarantine_outlives_record": yard.run(
            ended=40, checkpoint="quarantined", refs=("quarantine",), kept=True
        ),
        "young_quarantine": yard.run(
            ended=10, checkpoint="quarantined", refs=("quarantine",), kept=True
        ),
        "old_candidate": yard.run(ended=25, checkpoint="rejected", refs=("candidate",)),
        "young_candidate": yard.run(ended=10, checkpoint="conflict", refs=("candidate",)),
        "old_integrated": yard.run(ended=31),
        "young_integrated": yard.run(ended=29),
        "running": yard.run(ended=None, state="running", checkpoint="pending"),
        "quarantining": yard.run(
            ended=None, state="quarantining", checkpoint="pending", refs=("quarantine",)
        ),
        "owned": yard.run(ended=100, checkpoint="rejected", refs=("candidate",)),
    }
    # A candidate whose run record is gone: aged by its commit.
    orphan = run_id(0xABC)
    yard.repo.references.create(candidate_ref(orphan), yard.old_commit(days_ago=21))
    runs["orphan"] = orphan
    owner = RunOwnership.claim(yard.home, runs["owned"])
    assert owner is not None
    with owner:
        yield yard, runs


EXPECTED = {
    ("quarantine_ref", "old_quarantine"),
    ("kept_checkout", "old_quarantine"),
    ("run_dir", "old_quarantine"),
    ("candidate_ref", "old_candidate"),
    ("run_dir", "old_integrated"),
    ("candidate_ref", "orphan"),
}


def test_gc_removes_exactly_what_the_limits_let_go(world: tuple[Yard, dict[str, str]]) -> None:
    yard, runs = world
    home = yard.home
    result = run_gc(home, now=NOW, volumes=FakeVolumes())
    assert removed(result) == {(kind, runs[case]) for kind, case in EXPECTED}
    assert not result.failed and not result.with_status("skipped")

    gone = runs["old_quarantine"]
    assert not home.run_dir(gone).exists()
    assert not any(n.startswith(".trash-") for n in os.listdir(home.runs_dir))
    assert yard.refs() == {
        quarantine_ref(runs["quarantine_outlives_record"]),
        quarantine_ref(runs["young_quarantine"]),
        candidate_ref(runs["young_candidate"]),
        quarantine_ref(runs["quarantining"]),
        candidate_ref(runs["owned"]),
    }
    # A kept quarantine keeps its checkout and its record, though past finished_run_days.
    for case in ("quarantine_outlives_record", "young_quarantine"):
        assert home.run_space_image(runs[case]).exists()
        assert (home.run_checkout(runs[case]) / "records" / "a" / "x.md").exists()
        assert home.run_checkout_record(runs[case]).exists()
    # A removed candidate ref leaves a record younger than its own limit.
    assert home.manifest(runs["old_candidate"]).exists()
    for case in ("young_integrated", "running", "quarantining", "owned", "young_candidate"):
        assert home.manifest(runs[case]).exists(), case
    assert not home.run_dir(runs["old_integrated"]).exists()

    lines = Journal(home.journal).read(event="gc.removed")
    assert {(e["kind"], e["id"]) for e in lines} == removed(result)
    assert all(e["imp"] == "yuko" for e in lines)
    # Done: a second gc at the same time finds nothing more.
    assert run_gc(home, now=NOW, volumes=FakeVolumes()).plan.items == []


def test_dry_run_lists_the_same_items_and_changes_nothing(
    world: tuple[Yard, dict[str, str]],
) -> None:
    yard, runs = world
    before, refs = snapshot(yard.home), yard.refs()
    dry = run_gc(yard.home, now=NOW, dry_run=True, volumes=FakeVolumes())
    assert dry.dry_run and dry.outcomes == []
    assert planned(dry) == {(kind, runs[case]) for kind, case in EXPECTED}
    assert snapshot(yard.home) == before and yard.refs() == refs
    real = run_gc(yard.home, now=NOW, volumes=FakeVolumes())
    assert removed(real) == planned(dry)


def test_every_item_says_its_age_and_the_limit(world: tuple[Yard, dict[str, str]]) -> None:
    yard, runs = world
    plan = run_gc(yard.home, now=NOW, dry_run=True, volumes=FakeVolumes()).plan
    by = {(item.kind, item.id): item for item in plan.items}
    ref = by[("quarantine_ref", runs["old_quarantine"])]
    assert ref.path == quarantine_ref(runs["old_quarantine"]) and ref.imp == "yuko"
    assert ref.age_days == pytest.approx(50, abs=0.01)
    assert "retention.quarantine_days = 45" in ref.reason
    orphan = by[("candidate_ref", runs["orphan"])]
    assert orphan.age_days == pytest.approx(21, abs=0.01) and "no run record" in orphan.reason
    record = by[("run_dir", runs["old_integrated"])]
    assert record.path == str(yard.home.run_dir(runs["old_integrated"]))
    assert "retention.finished_run_days = 30" in record.reason


def test_fractional_days_count_hours(yard: Yard) -> None:
    set_retention(yard.home, finished_run_days=0.5)
    old, young = yard.run(ended=13 / 24), yard.run(ended=11 / 24)
    result = run_gc(yard.home, now=NOW, volumes=FakeVolumes())
    assert removed(result) == {("run_dir", old)}
    assert "retention.finished_run_days = 0.5" in result.outcomes[0].item.reason
    assert yard.home.manifest(young).exists()


def test_a_run_taken_up_after_the_plan_is_left_alone(yard: Yard) -> None:
    run = yard.run(ended=100, checkpoint="rejected", refs=("candidate",))
    from impyard.retention.apply import apply_gc
    from impyard.retention.plan import plan_gc

    plan = plan_gc(yard.home, now=NOW, volumes=FakeVolumes())
    assert planned(GcResult(plan, dry_run=True)) == {("candidate_ref", run), ("run_dir", run)}
    owner = RunOwnership.claim(yard.home, run)
    assert owner is not None
    with owner:
        result = apply_gc(yard.home, plan, FakeVolumes(), Journal(yard.home.journal))
    assert {o.status for o in result.outcomes} == {"skipped"}
    assert yard.home.manifest(run).exists() and candidate_ref(run) in yard.refs()


def test_one_gc_at_a_time(yard: Yard) -> None:
    with gc_lock(yard.home), pytest.raises(GcBusyError):
        run_gc(yard.home, now=NOW, volumes=FakeVolumes())
    # A dry run only reads, so it may look while a gc runs.
    with gc_lock(yard.home):
        run_gc(yard.home, now=NOW, dry_run=True, volumes=FakeVolumes())


# -- engine volumes ---------------------------------------------------------------------


def volume(home: Home, run: str, name: str | None = None, root: Path | None = None) -> EngineVolume:
    upper = (root or home.runs_dir) / run / "space" / "knowledge"
    return EngineVolume(
        name=name or f"impyard-{run}",
        labels={"impyard.run": run, "impyard.imp": "yuko"},
        options={"type": "overlay", "o": f"lowerdir=/x/t,upperdir={upper},workdir=/x/w"},
        created_at="2026-07-01T00:00:00Z",
    )


def test_volumes_of_finished_or_vanished_runs_go_and_no_other(yard: Yard, tmp_path: Path) -> None:
    finished = yard.run(ended=1)
    running = yard.run(ended=None, state="running", checkpoint="pending")
    owned = yard.run(ended=1)
    vanished = run_id(0xDEAD)
    elsewhere = run_id(0xBEEF)  # another data root on the same engine
    store = FakeVolumes(
        [
            volume(yard.home, finished),
            volume(yard.home, running),
            volume(yard.home, owned),
            volume(yard.home, vanished),
            volume(yard.home, elsewhere, root=tmp_path / "other" / "runs"),
            EngineVolume("impyard-probe-x", labels={"impyard.probe": "1"}),
        ]
    )
    owner = RunOwnership.claim(yard.home, owned)
    assert owner is not None
    with owner:
        result = run_gc(yard.home, now=NOW, volumes=store)
    assert removed(result) == {("volume", f"impyard-{finished}"), ("volume", f"impyard-{vanished}")}
    assert sorted(store.removed) == sorted([f"impyard-{finished}", f"impyard-{vanished}"])
    item = next(o.item for o in result.outcomes if o.item.run == finished)
    assert item.age_days == pytest.approx(31, abs=0.01) and "finished" in item.reason


def test_an_unreachable_engine_skips_volumes_and_says_so(yard: Yard) -> None:
    old = yard.run(ended=100)
    result = run_gc(yard.home, now=NOW, volumes=FakeVolumes(down=True))
    assert removed(result) == {("run_dir", old)}
    assert not result.failed
    assert any("engine volumes were not checked" in note for note in result.plan.notes)
    assert any("engine helpers were not checked" in note for note in result.plan.notes)


def test_helpers_their_creator_left_go_container_first(yard: Yard) -> None:
    """The engine's half (which helpers are this root's, whose lock is free) is the docker
    test's; here: gc plans what it is told was left, and removes containers first."""
    left = [
        LeftHelper("overlay-probe", "container", "c" * 64, "overlay-probe"),
        LeftHelper("overlay-probe", "volume", "impyard-probe-x", "overlay-probe"),
    ]
    store = FakeVolumes(helpers=left)
    dry = run_gc(yard.home, now=NOW, dry_run=True, volumes=store)
    assert planned(dry) == {("helper", "c" * 64), ("helper", "impyard-probe-x")}
    assert store.removed == []
    result = run_gc(yard.home, now=NOW, volumes=store)
    assert store.removed == ["c" * 64, "impyard-probe-x"]
    lines = Journal(yard.home.journal).read(event="gc.removed")
    assert [(e["kind"], e["id"]) for e in lines] == [
        ("helper", "c" * 64),
        ("helper", "impyard-probe-x"),
    ]
    assert not result.failed


# -- checkout layers --------------------------------------------------------------------


def test_layers_no_chain_needs_go_and_needed_ones_stay(yard: Yard) -> None:
    from impyard.knowledge.checkouts.checkout import prepare_checkout
    from impyard.knowledge.checkouts.layer_store import list_layers
    from impyard.knowledge.checkouts.layers import ensure_layer
    from tests.helpers.checkout import OWNER, commit, need_root

    need_root()  # layers are chowned to the box user
    home, repo = yard.home, yard.repo
    main = yard.main
    a = commit(repo, {"records/a/a--n_1_1.md": b"a\n"}, parent=main)
    b = commit(repo, {"records/a/b--n_1_2.md": b"b\n"}, parent=main)
    c = commit(repo, {"records/a/c--n_1_3.md": b"c\n"}, parent=main)
    repo.references.create("refs/heads/main", pygit2.Oid(hex=main), force=True)
    for base in (main, a, b, c):
        ensure_layer(home, "yuko", base, OWNER)

    set_retention(home, quarantine_days=14)
    old, young = (
        yard.run(ended=20, checkpoint="quarantined"),
        yard.run(ended=5, checkpoint="quarantined"),
    )
    for run, base in ((old, a), (young, b)):
        manifest = manifests.read(home, run)
        manifest.checkout = prepare_checkout(home, "yuko", run, base, "overlay", OWNER)
        manifest.space = RunSpace("plain", home.run_space(run), None, 2**20)
        manifests.write(home, manifest)

    commits = {layer.id: layer.commit for layer in list_layers(home, "yuko")}
    dry = run_gc(home, now=NOW, dry_run=True, volumes=FakeVolumes())
    layer_items = {item.id for item in dry.plan.items if item.kind == "layer"}
    assert {commits[i] for i in layer_items} == {a, c}  # old's chain, and nobody's

    result = run_gc(home, now=NOW, volumes=FakeVolumes())
    assert ("kept_checkout", old) in removed(result)
    assert {i for kind, i in removed(result) if kind == "layer"} == layer_items
    # main's layer and the young quarantine's chain (b on main) stay.
    assert {layer.commit for layer in list_layers(home, "yuko")} == {main, b}
    assert not home.run_checkout_record(old).exists()
    assert home.run_checkout_record(young).exists()


# -- source archive ---------------------------------------------------------------------


def test_the_archive_is_pruned_by_its_own_retention(yard: Yard) -> None:
    archive = Archive(yard.home.archive_dir)
    digests = {}
    for name, days in (("old", 91), ("fresh", 10)):
        sha = hashlib.sha256(name.encode()).hexdigest()
        path = archive.object_path(sha)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(name.encode())
        os.utime(path, (NOW - days * DAY, NOW - days * DAY))
        digests[name] = sha
    result = run_gc(yard.home, now=NOW, volumes=FakeVolumes())
    assert removed(result) == {("archive_object", digests["old"])}
    assert not archive.object_path(digests["old"]).exists()
    assert archive.object_path(digests["fresh"]).exists()
    assert archive.total_bytes() == len(b"fresh")


def test_spare_spaces_no_run_took_for_a_day_go(yard: Yard) -> None:
    """A spare of a size no run asks for any more, and a crash's half-formatted one,
    go after a day; a fresh spare waits for its run."""
    directory = runspace.spares_dir(yard.home)
    directory.mkdir()
    ages = {"1048576.1-1.img": 2, "2097152.1-2.img.tmp": 3, "1048576.1-3.img": 0.5}
    for name, days in ages.items():
        (directory / name).write_bytes(b"image")
        os.utime(directory / name, (NOW - days * DAY, NOW - days * DAY))
    result = run_gc(yard.home, now=NOW, volumes=FakeVolumes())
    assert removed(result) == {
        ("spare_space", "1048576.1-1.img"),
        ("spare_space", "2097152.1-2.img.tmp"),
    }
    assert sorted(p.name for p in directory.iterdir()) == ["1048576.1-3.img"]


# -- finished tasks -------------------------------------------------------------------


def add_task(home: Home, state: str, finished: float | None) -> str:
    """A task of yuko's in ``state``, finished ``finished`` days before NOW (None: never)."""
    with opened(home.db) as conn:
        task = tasks.add(conn, "yuko", "tidy the records")
        conn.execute(
            "UPDATE tasks SET state = ?, finished_at = ? WHERE id = ?",
            (state, None if finished is None else stamp(finished), task.id),
        )
    return task.id


def task_ids(home: Home) -> set[str]:
    with opened(home.db) as conn:
        return {task.id for task in tasks.list_tasks(conn)}


def test_finished_tasks_go_after_finished_run_days(yard: Yard) -> None:
    """Done and cancelled tasks go with the run records' limit; a younger one, and a queued
    or running one however old its stamp, stay; the namespaces registry is never touched."""
    home = yard.home
    set_retention(home, finished_run_days=30)
    with opened(home.db) as conn:
        namespaces.issue(conn, "yuko")
    old_done, old_cancelled = add_task(home, "done", 31), add_task(home, "cancelled", 40)
    young = add_task(home, "done", 29)
    queued, running = add_task(home, "queued", 100), add_task(home, "running", 100)
    waiting = add_task(home, "queued", None)
    expected = {("task", old_done), ("task", old_cancelled)}

    before = snapshot(home)
    dry = run_gc(home, now=NOW, dry_run=True, volumes=FakeVolumes())
    assert planned(dry) == expected
    assert snapshot(home) == before
    item = next(i for i in dry.plan.items if i.id == old_done)
    assert item.age_days == pytest.approx(31, abs=0.01) and item.imp == "yuko"
    assert item.reason == "finished (done) 31.0 days ago; retention.finished_run_days = 30"

    result = run_gc(home, now=NOW, volumes=FakeVolumes())
    assert removed(result) == expected and not result.failed
    assert task_ids(home) == {young, queued, running, waiting}
    lines = Journal(home.journal).read(event="gc.removed")
    assert {(e["kind"], e["id"]) for e in lines} == expected
    with opened(home.db) as conn:
        assert conn.execute("SELECT COUNT(*) FROM namespaces").fetchone()[0] == 1
    assert run_gc(home, now=NOW, volumes=FakeVolumes()).plan.items == []


def test_a_task_no_longer_finished_after_the_plan_is_left_alone(yard: Yard) -> None:
    from impyard.retention.apply import apply_gc
    from impyard.retention.plan import plan_gc

    home = yard.home
    changed, done = add_task(home, "cancelled", 100), add_task(home, "done", 100)
    plan = plan_gc(home, now=NOW, volumes=FakeVolumes())
    assert planned(GcResult(plan, dry_run=True)) == {("task", changed), ("task", done)}
    with opened(home.db) as conn:
        conn.execute("UPDATE tasks SET state = 'queued' WHERE id = ?", (changed,))
    result = apply_gc(home, plan, FakeVolumes(), Journal(home.journal))
    assert removed(result) == {("task", done)}
    assert [o.item.id for o in result.with_status("skipped")] == [changed]
    assert task_ids(home) == {changed}


# -- shared trust bundles ---------------------------------------------------------------


def bundle(home: Home, name: str, *, days: float, links: tuple[str, ...] = ()) -> Path:
    """A shared bundle ``days`` old, hard-linked as each of ``links`` runs' bundle."""
    path = home.box_bundles_dir / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"-----BEGIN CERTIFICATE-----\n{name}\n")
    for run in links:
        os.link(path, home.run_ca_bundle(run))
    os.utime(path, (NOW - days * DAY, NOW - days * DAY))
    return path


def test_trust_bundles_no_run_links_to_go_after_a_day(yard: Yard, tmp_path: Path) -> None:
    home = yard.home
    set_retention(home, finished_run_days=30)
    live, dropped = yard.run(ended=1), yard.run(ended=31)
    unlinked = bundle(home, "a" * 64 + ".pem", days=2)
    linked = bundle(home, "b" * 64 + ".pem", days=5, links=(live,))
    young = bundle(home, "c" * 64 + ".pem", days=0.5)
    last_linked = bundle(home, "d" * 64 + ".pem", days=5, links=(dropped,))
    # A symlink (old itself, to an old file no run links) is neither followed nor removed.
    outside = tmp_path / "outside.pem"
    outside.write_text("not a bundle\n")
    os.utime(outside, (NOW - 9 * DAY, NOW - 9 * DAY))
    symlink = home.box_bundles_dir / ("e" * 64 + ".pem")
    symlink.symlink_to(outside)
    os.utime(symlink, (NOW - 9 * DAY, NOW - 9 * DAY), follow_symlinks=False)
    expected = {("box_bundle", unlinked.name), ("box_bundle", last_linked.name)}

    dry = run_gc(home, now=NOW, dry_run=True, volumes=FakeVolumes())
    assert {(k, i) for k, i in planned(dry) if k == "box_bundle"} == expected
    assert unlinked.exists() and last_linked.exists()
    by = {item.id: item for item in dry.plan.items}
    assert by[unlinked.name].reason == "no run record links to it; written 2.0 days ago"
    assert "only run records this gc removes" in by[last_linked.name].reason

    result = run_gc(home, now=NOW, volumes=FakeVolumes())
    assert removed(result) == {*expected, ("run_dir", dropped)} and not result.failed
    assert sorted(p.name for p in home.box_bundles_dir.iterdir()) == sorted(
        [linked.name, young.name, symlink.name]
    )
    assert symlink.is_symlink() and outside.read_text() == "not a bundle\n"
    assert home.run_ca_bundle(live).read_text() == linked.read_text()


def test_a_bundle_changed_after_the_plan_is_kept(yard: Yard, tmp_path: Path) -> None:
    """Apply looks again: a bundle a run linked to since, or a name that is no longer a
    regular file, stays."""
    from impyard.retention.apply import apply_gc
    from impyard.retention.plan import plan_gc

    home = yard.home
    path = bundle(home, "f" * 64 + ".pem", days=3)
    swapped = bundle(home, "0" * 64 + ".pem", days=3)
    plan = plan_gc(home, now=NOW, volumes=FakeVolumes())
    assert planned(GcResult(plan, dry_run=True)) == {
        ("box_bundle", path.name),
        ("box_bundle", swapped.name),
    }
    run = yard.run(ended=None, state="running", checkpoint="pending")
    os.link(path, home.run_ca_bundle(run))
    swapped.unlink()
    swapped.symlink_to(tmp_path / "elsewhere.pem")
    result = apply_gc(home, plan, FakeVolumes(), Journal(home.journal))
    assert {(o.item.id, o.status, o.detail) for o in result.outcomes} == {
        (path.name, "skipped", "a run links to it again"),
        (swapped.name, "skipped", "no longer a regular file"),
    }
    assert path.exists() and swapped.is_symlink()


def loose_backlog(repo: pygit2.Repository, in_sample: int) -> dict[pygit2.Oid, bytes]:
    """Loose blobs written until ``objects/17`` (the directory folds count) holds
    ``in_sample`` of them, as an imp whose objects were written before folds has them."""
    sample = Path(repo.path) / "objects" / fold.SAMPLE_DIR
    blobs: dict[pygit2.Oid, bytes] = {}
    while len(os.listdir(sample) if sample.is_dir() else []) < in_sample:
        data = f"a record written before folds, {len(blobs)}\n".encode()
        blobs[repo.create_blob(data)] = data
    return blobs


def loose_count(repo: pygit2.Repository) -> int:
    objects = Path(repo.path) / "objects"
    return sum(len(os.listdir(d)) for d in objects.iterdir() if fold.LOOSE_DIR.fullmatch(d.name))


def test_a_backlog_of_loose_objects_is_folded_in_parts_and_every_object_stays(
    yard: Yard, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The lane's trigger at 3 files in the sample directory (not 16): ~770 objects, not 4,100.
    monkeypatch.setattr(fold, "SAMPLED_LOOSE", 3)
    monkeypatch.setattr(retained_objects, "SAMPLED_LOOSE", 3)
    monkeypatch.setattr(retained_objects, "GC_FOLD_OBJECTS", 200)
    blobs = loose_backlog(yard.repo, 3)
    before = loose_count(yard.repo)
    assert before >= len(blobs)

    plan = run_gc(yard.home, now=NOW, dry_run=True, volumes=FakeVolumes()).plan
    [item] = plan.of_kind("loose_objects")
    assert (item.id, item.imp, item.path) == (
        "yuko",
        "yuko",
        str(yard.home.repo("yuko") / "objects"),
    )
    assert "about 768 loose objects (objects/17 holds 3, the lane's trigger is 3;" in item.reason
    assert loose_count(yard.repo) == before  # a dry run folds nothing

    result = run_gc(yard.home, now=NOW, volumes=FakeVolumes())
    [outcome] = [o for o in result.outcomes if o.item.kind == "loose_objects"]
    assert outcome.status == "folded", outcome.detail
    folded = int((outcome.detail or "").split()[0])
    # In parts of 200 (the sample directory last), until it holds fewer than 3.
    assert folded > 400 and loose_count(yard.repo) == before - folded
    assert len(os.listdir(Path(yard.repo.path) / "objects" / fold.SAMPLE_DIR)) < 3
    fresh = pygit2.Repository(yard.repo.path)
    assert all(fresh[oid].data == data for oid, data in blobs.items())
    assert_fsck_clean(yard.repo.path)
    [event] = Journal(yard.home.journal).read(event="gc.folded")
    assert (event["kind"], event["imp"], event["detail"]) == (
        "loose_objects",
        "yuko",
        outcome.detail,
    )
    # Under the trigger now: nothing left to fold.
    assert not run_gc(yard.home, now=NOW, dry_run=True, volumes=FakeVolumes()).plan.items


def test_cli_says_it_would_fold_then_folds(
    cli: Cli, yard: Yard, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fold, "SAMPLED_LOOSE", 2)
    monkeypatch.setattr(retained_objects, "SAMPLED_LOOSE", 2)
    loose_backlog(yard.repo, 2)
    dry = cli("gc", "--dry-run", env=NO_ENGINE)
    assert dry.code == 0, dry.stderr
    assert "would fold loose_objects yuko (about 512 loose objects" in dry.stdout
    done = cli("gc", env=NO_ENGINE)
    assert done.code == 0, done.stderr
    assert re.search(r"folded loose_objects yuko \(\d+ loose objects into packs\)", done.stdout)
    assert "gc: 1 folded" in done.stdout


# -- the CLI ----------------------------------------------------------------------------


def test_cli_dry_run_then_gc(cli: Cli, yard: Yard) -> None:
    # The CLI runs on the real clock: these runs ended long before it.
    old = yard.run(ended=(NOW - (utc_epoch("2020-01-01T00:00:00Z") or 0)) / DAY)
    dry = cli("gc", "--dry-run", env=NO_ENGINE)
    assert dry.code == 0, dry.stderr
    assert f"would remove run_dir {yard.home.run_dir(old)}" in dry.stdout
    assert "note: engine volumes were not checked" in dry.stdout
    assert "gc (dry run): 1 item(s) would go" in dry.stdout
    assert yard.home.run_dir(old).exists()

    done = cli("gc", "--json", env=NO_ENGINE)
    assert done.code == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["dry_run"] is False
    assert [(o["kind"], o["id"], o["status"]) for o in document["outcomes"]] == [
        ("run_dir", old, "removed")
    ]
    assert document["limits"]["finished_run_days"] == 30
    assert not yard.home.run_dir(old).exists()
    journal = cli("journal", "--run", old, "--json")
    assert [e["event"] for e in json_lines(journal.stdout)] == ["gc.removed"]

    again = cli("gc", env=NO_ENGINE)
    assert again.code == 0 and "gc: nothing to remove" in again.stdout


def test_the_summary_counts_each_status_some_item_ended_with() -> None:
    from impyard.retention.model import GcItem, GcOutcome, GcPlan, GcResult, Limits, Status

    limits = Limits(1, 1, 1, 1, 1)
    items = [GcItem("run_dir", f"run-{n}", f"runs/run-{n}", "old") for n in range(5)]
    plan = GcPlan(now=NOW, limits=limits, items=items)
    ended: list[Status] = ["failed", "removed", "folded", "removed", "rotated"]
    outcomes = [GcOutcome(item, status) for item, status in zip(items, ended, strict=True)]
    assert GcResult(plan, dry_run=False, outcomes=outcomes).summary() == (
        "gc: 2 removed, 1 rotated, 1 folded, 1 failed"
    )
    assert GcResult(plan, dry_run=True).summary() == "gc (dry run): 5 item(s) would go"
    nothing = GcPlan(now=NOW, limits=limits)
    assert GcResult(nothing, dry_run=True).summary() == "gc: nothing to remove"
    assert GcResult(nothing, dry_run=False).summary() == "gc: nothing to remove"


def test_cli_refuses_while_another_gc_runs(cli: Cli, yard: Yard) -> None:
    with gc_lock(yard.home):
        result = cli("gc", env=NO_ENGINE)
    assert result.code == 1
    assert "another gc is running" in result.stderr


# -- serve's periodic gc ----------------------------------------------------------------


def test_serve_runs_gc_on_its_interval(yard: Yard, monkeypatch: pytest.MonkeyPatch) -> None:
    from impyard.runs.drive.context import RunContext
    from impyard.serve.worker import ServeEvent, Server, ServeStatus
    from impyard.settings import load_settings

    monkeypatch.setenv("DOCKER_HOST", NO_ENGINE["DOCKER_HOST"])
    old = yard.run(ended=(NOW - (utc_epoch("2020-01-01T00:00:00Z") or 0)) / DAY)
    events: list[str] = []

    def report(event: ServeEvent, status: ServeStatus) -> None:
        events.append(event.message)

    ctx = RunContext(settings=load_settings(yard.home.root), journal=Journal(yard.home.journal))
    server = Server(ctx, concurrency=1, once=True, report=report, gc_interval_seconds=0.05)
    assert server.gc.interval() == 0.05
    result = server.gc.tick()
    assert result is not None and removed(result) == {("run_dir", old)}
    assert "gc: 1 removed" in events
    assert not yard.home.run_dir(old).exists()


def test_periodic_gc_ticks_alone_and_survives_failures(yard: Yard) -> None:
    journal = Journal(yard.home.journal)
    ticks: list[int] = []
    release = threading.Event()
    entered = threading.Event()

    def slow_gc() -> GcResult:
        ticks.append(1)
        entered.set()
        release.wait(10)
        return run_gc(yard.home, now=NOW, volumes=FakeVolumes())

    periodic = PeriodicGc(yard.home, journal, interval_seconds=0.01, gc=slow_gc)
    worker = threading.Thread(target=periodic.tick)
    worker.start()
    assert entered.wait(10)
    assert periodic.tick() is None  # one at a time: the second is skipped, not queued
    release.set()
    worker.join(10)
    assert len(ticks) == 1

    errors: list[str] = []

    def broken() -> GcResult:
        raise RuntimeError("disk on fire")

    failing = PeriodicGc(
        yard.home, journal, interval_seconds=0.01, gc=broken, on_error=errors.append
    )
    assert failing.tick() is None
    assert errors == ["gc failed: RuntimeError: disk on fire"]
    (line,) = journal.read(event="gc.failed")
    assert line["error"] == "RuntimeError: disk on fire"

    # On its thread: every interval, until stopped.
    counted = threading.Semaphore(0)

    def counting() -> GcResult:
        counted.release()
        return run_gc(yard.home, now=NOW, volumes=FakeVolumes())

    looping = PeriodicGc(yard.home, journal, interval_seconds=0.01, gc=counting)
    looping.start()
    try:
        assert counted.acquire(timeout=10) and counted.acquire(timeout=10)
    finally:
        looping.stop(10)


def test_serve_reads_the_gc_interval_from_the_deployed_policy(yard: Yard) -> None:
    set_retention(yard.home, gc_interval_seconds=120)
    assert PeriodicGc(yard.home, Journal(yard.home.journal)).interval() == 120
