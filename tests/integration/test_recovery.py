"""Crash recovery at each step of the pipeline, against the real engine.

The host's death is simulated by an exception escaping the pipeline at a chosen
step (nothing after it runs, as with kill -9); a fresh context then recovers.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from impyard.dataroot import init_home
from impyard.home import Home
from impyard.journal.log import Journal
from impyard.knowledge.imps import create_imp, open_repo
from impyard.knowledge.store.repo import main_commit
from impyard.runs.drive.context import RunContext
from impyard.runs.drive.pipeline import Run
from impyard.runs.host.admission import execute
from impyard.runs.host.recovery import recover_all
from impyard.runs.records import manifest as manifests
from impyard.runs.records.model import RunRequest
from impyard.settings import Settings
from tests.helpers.git import GIT_ENV, git
from tests.helpers.repo import assert_fsck_clean

pytestmark = pytest.mark.docker

NOTE = 'printf "recovered fact\\n" | impyard-note facts one'


class HostDied(BaseException):
    """Stands for kill -9: not an Exception, so no handler in the pipeline catches it."""


def context(root: Path) -> RunContext:
    settings = Settings(home=root)
    return RunContext(settings=settings, journal=Journal(Home(root).journal))


@pytest.fixture
def home(tmp_path: Path) -> Home:
    home = Home(tmp_path / "home")
    init_home(home)
    create_imp(home, "yuko")
    return home


def die_at(monkeypatch: pytest.MonkeyPatch, method: str) -> None:
    def dead(*args: object, **kwargs: object) -> None:
        raise HostDied(method)

    monkeypatch.setattr(Run, method, dead)


def only_run(home: Home) -> manifests.Manifest:
    (manifest,) = manifests.list_all(home)
    return manifest


def landed_commits(home: Home, run_id: str) -> int:
    log = git("-C", home.repo("yuko"), "log", "--format=%B", "main").stdout
    return log.count(f"Impyard-Run: {run_id}")


def test_run_between_commit_and_bookkeeping_is_finished_once(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The lane moved main; the host died before the manifest said so.
    die_at(monkeypatch, "finish")
    with pytest.raises(HostDied):
        execute(context(home.root), RunRequest(imp="yuko", prompt="p", command=NOTE))
    dead = only_run(home)
    assert dead.state == "checkpointing"
    assert landed_commits(home, dead.run_id) == 1
    monkeypatch.undo()
    (resolution,) = recover_all(context(home.root))
    assert resolution.checkpoint == "integrated"
    after = only_run(home)
    assert after.state == "finished" and after.checkpoint == "integrated"
    assert after.produced_commit == main_commit(open_repo(home, "yuko"))
    assert landed_commits(home, dead.run_id) == 1, "never landed twice"
    events = [json.loads(line)["event"] for line in home.journal.read_text().splitlines()]
    assert "run.recovered" in events


@pytest.mark.parametrize(("exit_status", "checkpoint"), [(0, "integrated"), (3, "quarantined")])
def test_box_that_exited_while_host_was_down_is_checkpointed_by_its_status(
    home: Home, monkeypatch: pytest.MonkeyPatch, exit_status: int, checkpoint: str
) -> None:
    die_at(monkeypatch, "wait_box")
    request = RunRequest(imp="yuko", prompt="p", command=f"{NOTE}; exit {exit_status}")
    with pytest.raises(HostDied):
        execute(context(home.root), request)
    assert only_run(home).state == "running"
    monkeypatch.undo()
    (resolution,) = recover_all(context(home.root))
    assert resolution.found_state == "running"
    assert resolution.checkpoint == checkpoint
    after = only_run(home)
    assert after.exit_code == exit_status
    assert landed_commits(home, after.run_id) == (1 if checkpoint == "integrated" else 0)


def test_run_whose_box_never_started_is_quarantined(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    die_at(monkeypatch, "start_box")
    before = main_commit(open_repo(home, "yuko"))
    with pytest.raises(HostDied):
        execute(context(home.root), RunRequest(imp="yuko", prompt="p", command=NOTE))
    monkeypatch.undo()
    (resolution,) = recover_all(context(home.root))
    assert resolution.checkpoint == "quarantined"
    assert only_run(home).reason is not None
    assert main_commit(open_repo(home, "yuko")) == before


def test_the_admitted_timeout_is_enforced_after_a_crash(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`run --timeout 2` survives a host crash: recovery kills the box at once instead of
    waiting the policy's hour and integrating what should have been killed."""
    die_at(monkeypatch, "wait_box")
    request = RunRequest(imp="yuko", prompt="p", command=f"sleep 30; {NOTE}", timeout_seconds=2)
    with pytest.raises(HostDied):
        execute(context(home.root), request)
    assert only_run(home).timeout_seconds == 2
    monkeypatch.undo()
    time.sleep(2.5)
    started = time.monotonic()
    (resolution,) = recover_all(context(home.root))
    assert time.monotonic() - started < 15
    after = only_run(home)
    assert resolution.checkpoint == "quarantined"
    assert after.timed_out is True and after.reason == "timed out and killed"
    assert landed_commits(home, after.run_id) == 0


def test_a_box_that_finished_past_its_deadline_while_the_host_was_down_is_not_integrated(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    die_at(monkeypatch, "wait_box")
    request = RunRequest(imp="yuko", prompt="p", command=f"sleep 3; {NOTE}", timeout_seconds=1)
    with pytest.raises(HostDied):
        execute(context(home.root), request)
    monkeypatch.undo()
    time.sleep(4.5)  # the box exits 0 at ~3 s, two seconds past its deadline
    (resolution,) = recover_all(context(home.root))
    after = only_run(home)
    assert (resolution.checkpoint, after.timed_out, after.exit_code) == ("quarantined", True, 0)
    assert landed_commits(home, after.run_id) == 0


def test_a_run_recovery_cannot_integrate_is_quarantined_once_not_retried_forever(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Older versions admitted a channel with a newline; the trailer check then refused the
    commit on every recovery, leaving the run `checkpointing` for ever."""
    die_at(monkeypatch, "checkpoint")
    with pytest.raises(HostDied):
        execute(context(home.root), RunRequest(imp="yuko", prompt="p", command=NOTE))
    monkeypatch.undo()
    path = home.manifest(only_run(home).run_id)
    document = json.loads(path.read_text())
    assert document["state"] == "checkpointing"
    document["channel"] = "a\nb"
    path.write_text(json.dumps(document))
    (resolution,) = recover_all(context(home.root))
    after = only_run(home)
    assert resolution.checkpoint == "quarantined"
    assert after.state == "finished" and after.checkpoint == "quarantined"
    assert "recovery failed" in str(after.reason) and "Impyard-Channel" in str(after.reason)
    assert recover_all(context(home.root)) == []
    assert landed_commits(home, after.run_id) == 0


# The box retries its checkpoint until a host answers again (a dead host resets it).
RETRYING_BOX = "; ".join(
    [
        'printf "one\\n" | impyard-note facts one >/dev/null',
        "n=0",
        "until impyard-checkpoint; do n=$((n+1)); [ $n -lt 300 ] || exit 9; sleep 0.2; done",
        'printf "two\\n" | impyard-note facts two >/dev/null',
    ]
)


@pytest.mark.parametrize("point", ["before-ref", "after-ref"])
def test_host_death_in_a_mid_run_checkpoint_loses_nothing_and_lands_nothing_twice(
    home: Home, point: str
) -> None:
    """The host is SIGKILLed inside the box's first checkpoint (the commit written but main
    not moved, or main moved but the manifest not told). The box keeps running; a restarted
    serve adopts it, listens in its namespace again, and the box's retried checkpoint and
    its exit land each note exactly once."""
    env = {**os.environ, **GIT_ENV}
    env.pop("IMPYARD_HOME", None)
    argv = ["--home", str(home.root), "run", "yuko", "--prompt", "p", "--command", RETRYING_BOX]
    crashed = subprocess.run(
        [sys.executable, "-m", "tests.helpers.crash", point, *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    dead = only_run(home)
    assert dead.state == "running"
    assert [c.state for c in dead.checkpoints] == ["pending"]
    served = subprocess.run(
        [sys.executable, "-m", "impyard", "--home", str(home.root), "serve", "--once"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert served.returncode == 0, served.stderr
    assert "recovered" in served.stdout
    after = only_run(home)
    assert after.state == "finished" and after.checkpoint == "integrated", after.reason
    assert [(c.number, c.state) for c in after.checkpoints] == [(1, "integrated")]
    log = git("-C", home.repo("yuko"), "log", "--format=%B", "main").stdout
    assert log.count(f"Impyard-Run: {after.run_id}") == 2
    assert "Impyard-Checkpoint: 1 (mid-run)" in log and "Impyard-Checkpoint: 2 (exit)" in log
    files = git("-C", home.repo("yuko"), "ls-tree", "-r", "--name-only", "main").stdout.split()
    ns = after.namespace
    assert {f"records/facts/one--{ns}_1.md", f"records/facts/two--{ns}_2.md"} <= set(files)
    events = [e["event"] for e in Journal(home.journal).read(run=after.run_id)]
    assert "gateway.reattached" in events and "knowledge.checkpoint_recovered" in events
    assert_fsck_clean(home.repo("yuko"))
