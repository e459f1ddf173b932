"""A host that dies while a run starts leaves nothing on the engine that recovery cannot
find: every container Impyard creates carries its data root's label, and the next
command that recovers removes what the dead driver left (never another data root's)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from impyard.box.docker import engine
from impyard.box.docker.engine import EngineObjectNotFoundError
from impyard.box.launcher.helpers import helper_labels, holding
from impyard.box.spec import LABEL_HELPER, LABEL_ROOT, root_label
from impyard.dataroot import init_home
from impyard.home import Home
from impyard.journal.log import Journal
from impyard.knowledge.imps import create_imp
from impyard.runs.records import manifest as manifests
from tests.helpers.git import GIT_ENV
from tests.helpers.images import BOX_IMAGE

pytestmark = pytest.mark.docker

#: What each kill point found last created.
KIND = {
    "probe-created": "overlay-probe",
    "roots-created": "image-roots",
    "roots-removed": "image-roots",
    "box-created": "box",
}


def _impyard(
    home: Home, *args: str, crash: str | None = None, record: Path | None = None
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **GIT_ENV}
    env.pop("IMPYARD_HOME", None)
    if record is not None:
        env["IMPYARD_CRASH_RECORD"] = str(record)
    module = ["tests.helpers.crash", crash] if crash is not None else ["impyard"]
    return subprocess.run(
        [sys.executable, "-m", *module, "--home", str(home.root), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
    )


def _exists(container_id: str) -> bool:
    try:
        engine.call(
            "inspect", engine.api().inspect_container, container_id, container_id=container_id
        )
    except EngineObjectNotFoundError:
        return False
    return True


def _of_root(home: Home) -> list[str]:
    """The containers and volumes on the engine labelled as this data root's."""
    api, wanted = engine.api(), {"label": [f"{LABEL_ROOT}={root_label(home.root)}"]}
    volumes = api.volumes(filters=wanted).get("Volumes") or []
    containers = api.containers(all=True, filters=wanted)
    return [str(c["Id"]) for c in containers] + [str(v["Name"]) for v in volumes]


@pytest.mark.parametrize(
    "point", ["probe-created", "roots-created", "roots-removed", "box-created"]
)
def test_a_driver_killed_as_a_fresh_data_roots_first_run_starts_leaves_no_container(
    tmp_path: Path, point: str
) -> None:
    home = Home(tmp_path / "home")
    init_home(home)  # fresh: no image's CA roots are cached yet
    create_imp(home, "yuko")
    record = tmp_path / "created.jsonl"
    argv = ("run", "yuko", "--prompt", "p", "--command", "true")
    crashed = _impyard(home, *argv, crash=point, record=record)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    created = [json.loads(line) for line in record.read_text().splitlines()]
    kinds = [c["kind"] for c in created]
    order = ["overlay-probe", "image-roots", "box"]
    # A fresh data root's first run probes the engine, then reads its image's CA roots.
    assert kinds == order[: order.index(KIND[point]) + 1], created
    for each in created:
        assert each["labels"].get(LABEL_ROOT) == root_label(home.root), each
        assert each["labels"].get(LABEL_HELPER, "box") == each["kind"], each

    served = _impyard(home, "serve", "--once")
    assert served.returncode == 0, served.stderr
    assert [c["id"] for c in created if _exists(c["id"])] == []
    assert _of_root(home) == []
    # The probe comes before the run is admitted; a run admitted is finished (quarantined).
    assert [m.state for m in manifests.list_all(home)] == (
        [] if point == "probe-created" else ["finished"]
    )
    removed = Journal(home.journal).read(event="box.helper_removed")
    left = [(e["helper"], e.get("container")) for e in removed if "container" in e]
    if point in ("probe-created", "roots-created"):
        assert left == [(KIND[point], created[-1]["id"])]


def test_recovery_leaves_another_data_roots_helper_alone(tmp_path: Path) -> None:
    mine, theirs = Home(tmp_path / "mine"), Home(tmp_path / "theirs")
    for home in (mine, theirs):
        init_home(home)
        create_imp(home, "yuko")
    record = tmp_path / "created.jsonl"
    argv = ("run", "yuko", "--prompt", "p", "--command", "true")
    crashed = _impyard(theirs, *argv, crash="roots-created", record=record)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    *_probe, helper = [json.loads(line)["id"] for line in record.read_text().splitlines()]
    try:
        assert _impyard(mine, "serve", "--once").returncode == 0
        assert _exists(helper), "another data root's container is not this one's to remove"
    finally:
        assert _impyard(theirs, "serve", "--once").returncode == 0
    assert not _exists(helper)


def test_recovery_leaves_a_helper_its_live_creator_holds(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    init_home(home)
    lock = home.root / "helper.lock"
    labels = helper_labels(home.root, lock, "overlay-probe", "overlay-probe", "-")
    api = engine.api()
    with holding(lock):
        created = engine.call("create", api.create_container, BOX_IMAGE, labels=labels)
        helper = str(created["Id"])
        try:
            assert _impyard(home, "serve", "--once").returncode == 0
            assert _exists(helper), "its creator is alive: the helper is in use"
        except BaseException:
            engine.call("remove", api.remove_container, helper, force=True, container_id=helper)
            raise
    assert _impyard(home, "serve", "--once").returncode == 0
    assert not _exists(helper)


def test_gc_removes_the_helper_a_dead_driver_left(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    init_home(home)
    create_imp(home, "yuko")
    record = tmp_path / "created.jsonl"
    argv = ("run", "yuko", "--prompt", "p", "--command", "true")
    crashed = _impyard(home, *argv, crash="roots-created", record=record)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    helper = json.loads(record.read_text().splitlines()[-1])["id"]
    try:
        dry = _impyard(home, "gc", "--dry-run", "--json")
        assert dry.returncode == 0, dry.stderr
        planned = json.loads(dry.stdout)["items"]
        assert [(i["kind"], i["id"]) for i in planned if i["kind"] == "helper"] == [
            ("helper", helper)
        ]
        assert _exists(helper)
        collected = _impyard(home, "gc")
        assert collected.returncode == 0, collected.stderr
        assert not _exists(helper)
    finally:
        assert _impyard(home, "serve", "--once").returncode == 0
    assert _of_root(home) == []


def test_a_check_box_killed_midway_leaves_its_box_to_recovery(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    init_home(home)
    record = tmp_path / "created.jsonl"
    crashed = _impyard(home, "check", "box", crash="check-network", record=record)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    (probe,) = [json.loads(line) for line in record.read_text().splitlines()]
    assert probe["labels"].get(LABEL_ROOT) == root_label(home.root), probe
    assert _of_root(home) == [probe["id"]]
    assert _impyard(home, "serve", "--once").returncode == 0
    assert _of_root(home) == [] and not _exists(probe["id"])
