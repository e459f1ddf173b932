"""Backup pushes: what reaches a local bare remote after the lane, mirroring of candidate and
quarantine refs, a diverged remote main, status.json, coalescing, and remotes that are down."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pygit2
import pytest

from impyard import backup
from impyard.backup import worker as worker_module
from impyard.backup.meta import SETTINGS_REF
from impyard.backup.push import PushResult
from impyard.backup.status import read_status
from impyard.backup.sync import backup_imp
from impyard.backup.worker import Worker
from impyard.home import Home
from impyard.journal.log import Journal
from impyard.knowledge.change import Change
from impyard.knowledge.imps import open_repo
from impyard.knowledge.integration.quarantine import quarantine
from impyard.knowledge.store.repo import main_commit
from impyard.runs.checkpoints.control import BoxControl
from impyard.runs.drive import endings
from tests.helpers.backup import backed_up, land_note, refs, reject_note, set_remotes
from tests.helpers.git import git
from tests.helpers.gitdaemon import free_port
from tests.helpers.repo import NS, RUN, make_imp, note, run_id
from tests.helpers.runs import running

STATUS_KEYS = {"pushed_at", "pushed_main", "last_error", "failing_since", "attempts"}


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Home]:
    home, _ = make_imp(tmp_path)
    yield home
    backup.flush(30)  # nothing of this test's may still push once its directory is gone


def remote_of(tmp_path: Path) -> Path:
    return tmp_path / "backups"


def test_a_push_after_integration_mirrors_main_candidates_and_quarantine(
    home: Home, tmp_path: Path
) -> None:
    base = remote_of(tmp_path)
    set_remotes(home, [str(base)])
    land_note(home, 1)
    candidate = reject_note(home, 2)
    repo = open_repo(home, "yuko")
    quarantine(repo, run_id(3), main_commit(repo), Change(), "killed")
    land_note(home, 4)
    backup.notify(home, "yuko")
    assert backup.flush(30)

    remote = base / "yuko.git"  # created, bare, on the first push
    assert backed_up(remote) == backed_up(home.repo("yuko"))
    assert candidate in backed_up(remote) and f"refs/quarantine/{run_id(3)}" in backed_up(remote)
    assert git("-C", remote, "rev-parse", "--is-bare-repository").stdout.strip() == "true"
    # The imp's settings travel beside its refs; the canonical repo gains no ref for them.
    assert SETTINGS_REF in refs(remote) and SETTINGS_REF not in refs(home.repo("yuko"))
    [pushed] = Journal(home.journal).read(event="backup.pushed")
    assert pushed["imp"] == "yuko" and pushed["remote"] == str(base)
    assert pushed["commit"] == main_commit(repo)

    # A candidate or quarantine ref that goes here goes there too.
    repo.references.delete(candidate)
    repo.references.delete(f"refs/quarantine/{run_id(3)}")
    [result] = backup_imp(home, "yuko")
    assert result.ok and result.deleted == 2
    assert backed_up(remote) == backed_up(home.repo("yuko"))
    # Nothing new: nothing is pushed, and the journal is not told.
    [again] = backup_imp(home, "yuko")
    assert again.ok and (again.updated, again.deleted) == (0, 0)
    assert len(Journal(home.journal).read(event="backup.pushed")) == 2


def test_a_remote_main_that_is_not_ours_is_reported_and_left_alone(
    home: Home, tmp_path: Path
) -> None:
    base = remote_of(tmp_path)
    set_remotes(home, [str(base)])
    land_note(home, 1)
    [first] = backup_imp(home, "yuko")
    assert first.ok
    # Someone commits straight to the backup's main.
    remote = pygit2.Repository(str(base / "yuko.git"))
    head = remote.references["refs/heads/main"].peel(pygit2.Commit)
    sig = pygit2.Signature("x", "x@example.invalid")
    foreign = remote.create_commit(
        "refs/heads/main", sig, sig, "foreign\n", head.tree_id, [head.id]
    )
    land_note(home, 2)
    candidate = reject_note(home, 3)

    [result] = backup_imp(home, "yuko", attempts=3)
    assert not result.ok and "is not an ancestor of main" in (result.error or "")
    assert result.attempts == 1  # nothing to retry: an owner decides
    assert backed_up(base / "yuko.git")["refs/heads/main"] == str(foreign)
    assert candidate in backed_up(base / "yuko.git")  # the rest still went
    entry = read_status(home)["yuko"][str(base)]
    assert entry.pushed_main == first.main and entry.failing


def test_status_json_has_the_documented_shape(home: Home, tmp_path: Path) -> None:
    good, down = str(remote_of(tmp_path)), f"git://127.0.0.1:{free_port()}/"
    set_remotes(home, [good, down])
    land_note(home, 1)
    backup_imp(home, "yuko", attempts=2)
    raw = json.loads(home.backup_status.read_text())
    assert set(raw) == {"yuko"} and set(raw["yuko"]) == {good, down}
    for entry in raw["yuko"].values():
        assert set(entry) == STATUS_KEYS
    main = main_commit(open_repo(home, "yuko"))
    ok, failing = raw["yuko"][good], raw["yuko"][down]
    assert ok["pushed_main"] == main and ok["pushed_at"] and ok["attempts"] == 0
    assert ok["last_error"] is None and ok["failing_since"] is None
    assert failing["pushed_at"] is None and failing["pushed_main"] is None
    assert "127.0.0.1" in failing["last_error"] and failing["attempts"] == 2
    since = failing["failing_since"]

    backup_imp(home, "yuko", attempts=1)  # still down: the streak keeps its start
    failing = json.loads(home.backup_status.read_text())["yuko"][down]
    assert failing["failing_since"] == since and failing["attempts"] == 3
    [failed, _] = Journal(home.journal).read(event="backup.failed")
    assert failed["remote"] == down and failed["attempts"] == 2

    set_remotes(home, [good])  # a remote no longer configured is dropped at the next push
    backup_imp(home, "yuko")
    assert set(json.loads(home.backup_status.read_text())["yuko"]) == {good}


def test_a_password_in_a_remote_url_is_never_stored_or_journaled(home: Home) -> None:
    port = free_port()
    set_remotes(home, [f"git://user:s3cret@127.0.0.1:{port}/"])
    backup_imp(home, "yuko", attempts=1)
    assert "s3cret" not in home.backup_status.read_text()
    assert "s3cret" not in home.journal.read_text()
    assert f"git://user:***@127.0.0.1:{port}/" in read_status(home)["yuko"]


def test_a_remote_that_is_down_never_holds_the_lane(
    home: Home, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("impyard.backup.push.BACKOFF_SECONDS", 0.01)  # the test's pace only
    unwritable = tmp_path / "file"
    unwritable.write_text("a file, so no directory can be made under it\n")
    closed = f"git://127.0.0.1:{free_port()}/"
    set_remotes(home, [closed, str(unwritable / "backups")])
    for n in range(1, 6):
        result = land_note(home, n)
        backup.notify(home, "yuko")  # what the run's ending does after the lane
        assert main_commit(open_repo(home, "yuko")) == result.commit
    assert backup.flush(60)
    entries = read_status(home)["yuko"]
    assert all(entry.failing and entry.pushed_main is None for entry in entries.values())
    assert "cannot create the backup repository" in (
        entries[str(unwritable / "backups")].last_error or ""
    )
    assert Journal(home.journal).read(event="backup.failed")


def test_a_remote_that_hangs_never_holds_the_lane(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("impyard.backup.push.BACKOFF_SECONDS", 0.01)
    # Connections complete (the kernel's backlog) but nobody ever answers them.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        set_remotes(home, [f"git://127.0.0.1:{silent.getsockname()[1]}/"])
        first = land_note(home, 1)
        backup.notify(home, "yuko")
        for n in range(2, 6):
            result = land_note(home, n)  # while the first push waits on the silent server
            backup.notify(home, "yuko")
            assert main_commit(open_repo(home, "yuko")) == result.commit != first.commit
        assert not backup.flush(0.2)  # the push is still hanging, the lane went on
    # Closing the listener resets what waited in its backlog: the push fails, status says so.
    assert backup.flush(60)
    [entry] = read_status(home)["yuko"].values()
    assert entry.failing and entry.pushed_main is None


def test_a_hundred_notifies_for_one_imp_are_one_push(monkeypatch: pytest.MonkeyPatch) -> None:
    started, release = threading.Event(), threading.Event()
    calls: list[str] = []

    def slow_backup(home: Home, imp: str, **_: Any) -> list[PushResult]:
        calls.append(imp)
        started.set()
        release.wait(10)
        return []

    monkeypatch.setattr("impyard.backup.sync.backup_imp", slow_backup)
    worker = Worker()
    home = Home(Path("/nonexistent-home"))
    worker.notify(home, "yuko")
    assert started.wait(10)
    for _ in range(100):  # while the first push runs: they become one more
        worker.notify(home, "yuko")
    for _ in range(100):
        worker.notify(home, "other")
    assert not worker.flush(0.05)  # still pushing
    release.set()
    assert worker.flush(10)
    assert calls == ["yuko", "yuko", "other"]
    assert worker.rounds == 3


def test_real_pushes_coalesce_and_end_up_current(home: Home, tmp_path: Path) -> None:
    set_remotes(home, [str(remote_of(tmp_path))])
    for n in range(1, 21):
        land_note(home, n)
    before = worker_module.worker().rounds
    # A burst of notifies (as a pass landing many runs sends) is one push, or two if the
    # worker picked up the first before the rest arrived; never one per notify, whatever
    # the machine's load (landing between notifies would let a busy worker keep up).
    for _ in range(20):
        backup.notify(home, "yuko")
    assert backup.flush(60)
    assert worker_module.worker().rounds - before <= 2
    assert backed_up(remote_of(tmp_path) / "yuko.git") == backed_up(home.repo("yuko"))


def test_a_failing_push_is_retried_with_backoff_then_given_up(home: Home) -> None:
    set_remotes(home, [f"git://127.0.0.1:{free_port()}/"])
    [result] = backup_imp(home, "yuko", attempts=3)
    assert not result.ok and result.attempts == 3
    assert result.duration_ms >= 1000 * (0.5 + 1.0) * 0.9  # two backoffs between three tries


def test_an_abandoned_push_is_not_retried(home: Home) -> None:
    set_remotes(home, [f"git://127.0.0.1:{free_port()}/"])
    gone = threading.Event()
    gone.set()
    [result] = backup_imp(home, "yuko", attempts=5, abandon=gone)
    assert not result.ok and result.attempts == 1


def test_without_remotes_nothing_is_pushed_or_written(home: Home) -> None:
    assert backup_imp(home, "yuko") == []
    backup.notify(home, "yuko")
    assert backup.flush(10)
    assert not home.backup_status.exists()


# --- the hooks: the run's endings and the box's mid-run checkpoint ----------------------


def put(root: Path, path: str, data: bytes) -> None:
    (root / path).parent.mkdir(parents=True, exist_ok=True)
    (root / path).write_bytes(data)


def test_mid_run_and_exit_checkpoints_are_pushed(home: Home, tmp_path: Path) -> None:
    set_remotes(home, [str(remote_of(tmp_path))])
    remote = remote_of(tmp_path) / "yuko.git"
    run, root = running(home)
    put(root, *note(NS, 1))
    answer = BoxControl(run).checkpoint()  # type: ignore[arg-type]
    assert answer["outcome"] == "integrated"
    assert backup.flush(30)
    assert backed_up(remote)["refs/heads/main"] == answer["commit"]

    put(root, *note(NS, 2))
    run.manifest.state = "running"
    endings.checkpoint(run)  # type: ignore[arg-type]
    assert run.finished["checkpoint"] == "integrated"
    assert backup.flush(30)
    assert backed_up(remote)["refs/heads/main"] == run.finished["produced_commit"]


def test_a_quarantine_is_pushed(home: Home, tmp_path: Path) -> None:
    set_remotes(home, [str(remote_of(tmp_path))])
    run, root = running(home)
    put(root, *note(NS, 1))
    run.manifest.reason = "timed out and killed"
    endings.quarantine_run(run)  # type: ignore[arg-type]
    assert run.finished["checkpoint"] == "quarantined"
    assert backup.flush(30)
    assert f"refs/quarantine/{RUN}" in backed_up(remote_of(tmp_path) / "yuko.git")


# --- process exit: a short-lived process leaves with its push done or abandoned --------


def test_drain_waits_for_the_push_without_retrying(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("impyard.backup.push.BACKOFF_SECONDS", 100.0)  # a retry would hang
    down = f"git://127.0.0.1:{free_port()}/"
    set_remotes(home, [down])
    worker = Worker()
    worker.notify(home, "yuko")
    assert worker.drain(30)  # one attempt, then given up: no 100 s backoff
    entry = read_status(home)["yuko"][down]
    assert entry.failing and entry.attempts == 1
    assert not worker.abandon.is_set()  # a drained worker retries again


EXITING = """
import sys
from pathlib import Path
from impyard import backup
from impyard.home import Home
from tests.helpers.backup import land_note
home = Home(Path(sys.argv[1]))
land_note(home, 2)
backup.notify(home, "yuko")
"""


def test_a_short_lived_process_exits_after_its_push(home: Home, tmp_path: Path) -> None:
    set_remotes(home, [str(remote_of(tmp_path))])
    land_note(home, 1)
    proc = subprocess.run(
        [sys.executable, "-c", EXITING, str(home.root)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert proc.returncode == 0, proc.stderr
    status = home.backup_status.read_text() if home.backup_status.exists() else "no status"
    assert backed_up(remote_of(tmp_path) / "yuko.git") == backed_up(home.repo("yuko")), status
