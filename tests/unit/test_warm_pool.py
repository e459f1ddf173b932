"""Ready boxes without an engine: which runs may share a pool (its key), that one claim
takes a ready box however many race for it, and ``[box.warm]`` under the overlay rules."""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from impyard.box.spec import BoxMount, BoxSpec, box_labels
from impyard.dataroot import init_home
from impyard.home import Home
from impyard.policy import PolicyError, deploy
from impyard.runs.ready import pool as warmpool
from impyard.runs.ready.claim import record_want
from impyard.runs.ready.pool import PoolShape
from impyard.status.warm import warm_section
from tests.helpers.policy import edit_org
from tests.helpers.runs import write_run


@pytest.fixture
def home(tmp_path: Path) -> Home:
    home = Home(tmp_path / "home")
    init_home(home)
    return home


def spec(run: str = "run-a", **changes: object) -> BoxSpec:
    base = BoxSpec(
        image="impyard-box:latest",
        command=["/bin/sh", "-c", f"echo {run}"],
        labels=box_labels(run, "yuko", root=Path("/srv/root")),
        env={"IMPYARD_RUN_ID": run},
        mounts=[
            BoxMount(
                source=f"/srv/{run}/knowledge", target="/opt/impyard/knowledge", read_only=False
            ),
            BoxMount(source=f"/srv/{run}/task.md", target="/opt/impyard/task.md", read_only=True),
        ],
        name=f"impyard-{run}",
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def test_two_runs_of_one_shape_share_a_pool_whatever_their_run() -> None:
    one = PoolShape.of(spec("run-a"), "sha256:1")
    other = PoolShape.of(spec("run-b", timeout_seconds=60.0), "sha256:1")
    assert one.key == other.key
    assert PoolShape.from_dict(json.loads(json.dumps(one.__dict__))) == one


@pytest.mark.parametrize(
    "change",
    [
        {"user": "1000:1000"},
        {"memory_bytes": 256 * 2**20},
        {"cpus": 0.5},
        {"pids_limit": 64},
        {"runtime": "runsc"},
        {"mounts": [BoxMount(source="/t", target="/opt/impyard/task.md", read_only=True)]},
    ],
)
def test_every_setting_fixed_once_a_box_runs_makes_another_pool(change: dict[str, object]) -> None:
    assert PoolShape.of(spec(), "sha256:1").key != PoolShape.of(spec(**change), "sha256:1").key


def test_another_image_makes_another_pool() -> None:
    assert PoolShape.of(spec(), "sha256:1").key != PoolShape.of(spec(), "sha256:2").key


def ready_box(home: Home, key: str, name: str, created: float) -> None:
    box_dir = home.warm_dir / key / name
    box_dir.mkdir(parents=True)
    record = {"container_id": f"c-{name}", "created": created}
    (box_dir / "box.json").write_text(json.dumps(record))
    (box_dir / "ready").touch()


def test_a_ready_box_goes_to_exactly_one_of_many_claims(home: Home) -> None:
    ready_box(home, "k1", "impyard-warm-a", 1.0)
    (box,) = warmpool.ready_boxes(home, "k1")
    start = threading.Barrier(8)
    won: list[bool] = []

    def contend() -> None:
        start.wait()
        won.append(warmpool.take(box))

    threads = [threading.Thread(target=contend) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(won) == [False] * 7 + [True]
    assert warmpool.ready_boxes(home, "k1") == []


def test_claims_take_the_oldest_ready_box_of_their_own_pool(home: Home) -> None:
    ready_box(home, "k1", "impyard-warm-new", 20.0)
    ready_box(home, "k1", "impyard-warm-old", 10.0)
    ready_box(home, "k2", "impyard-warm-other", 1.0)
    assert [b.name for b in warmpool.ready_boxes(home, "k1")] == [
        "impyard-warm-old",
        "impyard-warm-new",
    ]


def overlay(home: Home, text: str) -> None:
    home.imp_policy("yuko").write_text(text)


def test_an_overlay_may_lower_the_ready_boxes_or_opt_out_never_raise(home: Home) -> None:
    edit_org(home.root, "boxes = 0", "boxes = 3")
    assert deploy(home).policy_for("yuko").box.warm.boxes == 3
    overlay(home, "[box.warm]\nboxes = 1\n")
    assert deploy(home).policy_for("yuko").box.warm.boxes == 1
    overlay(home, "[box.warm]\nboxes = 0\n")
    assert deploy(home).policy_for("yuko").box.warm.boxes == 0
    overlay(home, "[box.warm]\nboxes = 4\nmax_age_seconds = 99999\n")
    with pytest.raises(PolicyError) as info:
        deploy(home)
    assert [(v.key, v.rule) for v in info.value.violations] == [
        ("box.warm.boxes", "enlarges-limit"),
        ("box.warm.max_age_seconds", "enlarges-limit"),
    ]


def test_the_org_default_keeps_no_ready_box(home: Home) -> None:
    assert deploy(home).policy_for("yuko").box.warm.boxes == 0


def test_status_counts_hits_misses_and_claim_times_of_recent_runs_and_each_pools_boxes(
    home: Home,
) -> None:
    edit_org(home.root, "boxes = 0", "boxes = 2")
    deploy(home)
    shape = PoolShape.of(spec(), "sha256:1")
    record_want(home, "yuko", shape)
    ready_box(home, shape.key, "impyard-warm-a", 1.0)
    ready_box(home, "stale", "impyard-warm-b", 2.0)
    done = {"state": "finished", "checkpoint": "integrated"}
    for i, claim in enumerate([4.0, 6.0, 50.0]):
        write_run(home, f"run-20261205T09000{i}Z-00000000a{i}", warm=True, warm_pool=shape.key,
                  timings_ms={"claim": claim}, **done)  # fmt: skip
    write_run(home, "run-20261205T090003Z-00000000a3", warm_pool=shape.key, **done)  # a miss
    write_run(home, "run-20261205T090004Z-00000000a4", **done)  # no pool wanted: neither
    write_run(
        home, "run-20261205T090005Z-00000000a5", warm=True, warm_pool=shape.key, state="running"
    )

    section = warm_section(home)
    assert (section.recent_runs, section.hits, section.misses) == (5, 3, 1)
    assert (section.claim_ms_p50, section.claim_ms_p95) == (6.0, 50.0)
    pools = {p.key: (p.ready, p.wanted) for p in section.pools}
    assert pools == {shape.key: (1, 2), "stale": (1, 0)}


def test_a_prefilled_box_fits_only_a_run_of_its_imp_on_its_base(tmp_path: Path) -> None:
    from impyard.runs.ready.prefill import PREFILL_FILE, fits

    box = warmpool.PoolBox("k", "impyard-warm-k-1", tmp_path, "cid", 0.0)
    assert fits(box, "yuko", "a" * 40)  # no prefill: any run of the shape copies
    (tmp_path / PREFILL_FILE).write_text(json.dumps({"imp": "yuko", "base": "a" * 40}))
    assert fits(box, "yuko", "a" * 40)
    assert not fits(box, "kenji", "a" * 40)  # another imp's knowledge: never
    assert not fits(box, "yuko", "b" * 40)  # main moved on
    (tmp_path / PREFILL_FILE).write_text("{not json")
    assert not fits(box, "yuko", "a" * 40)  # an unreadable record is no one's
