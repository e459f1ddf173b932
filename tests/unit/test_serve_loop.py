"""serve's loop without an engine: claims, endings and the engine check, with a stand-in
for the run itself (``admission.execute``)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from impyard.common.errors import EngineError
from impyard.home import Home
from impyard.journal.log import Journal
from impyard.journal_group import GroupJournal
from impyard.knowledge.checkouts.runspace import DiskSpaceError
from impyard.knowledge.imps import create_imp
from impyard.queue import tasks
from impyard.queue.db import opened, transaction
from impyard.runs.drive.context import RunContext
from impyard.runs.records.model import RunOutcome, RunRequest
from impyard.serve import worker as serve_module
from impyard.serve.worker import ENGINE_FRESH_SECONDS, Server
from impyard.settings import load_settings
from tests.helpers.repo import make_imp, run_id
from tests.helpers.runs import manifest_for

Execute = Callable[[RunContext, RunRequest], RunOutcome]


@pytest.fixture
def home(tmp_path: Path) -> Home:
    home, _repo = make_imp(tmp_path, "ada")
    create_imp(home, "bob")
    return home


def server(home: Home, concurrency: int) -> Server:
    ctx = RunContext(settings=load_settings(home.root), journal=Journal(home.journal))
    made = Server(ctx, concurrency=concurrency, once=True, gc_interval_seconds=3600)
    made._engine_ok = lambda: True  # type: ignore[method-assign]
    return made


def outcome(request: RunRequest, number: int) -> RunOutcome:
    manifest = manifest_for(request, number)
    manifest.checkpoint = "integrated"
    return RunOutcome(manifest)


@pytest.fixture
def stand_in(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[Execute], None]]:
    def use(execute: Execute) -> None:
        monkeypatch.setattr(serve_module, "execute", execute)

    yield use


def add(home: Home, imp: str, prompt: str, *, reorganize: bool = False) -> str:
    with opened(home.db) as conn:
        return tasks.add(conn, imp, prompt, reorganize=reorganize).id


def by_id(home: Home) -> dict[str, tasks.Task]:
    with opened(home.db) as conn:
        return {t.id: t for t in tasks.list_tasks(conn)}


def test_one_imps_stuck_run_holds_no_other_imps_task(
    home: Home, stand_in: Callable[[Execute], None]
) -> None:
    """ada's run never ends until released; bob's tasks go through the other slot, and each
    is recorded done as it ends, not when serve stops."""
    release = threading.Event()
    numbers = iter(range(1, 100))

    def execute(ctx: RunContext, request: RunRequest) -> RunOutcome:
        if request.imp == "ada":
            assert release.wait(30)
        return outcome(request, next(numbers))

    stand_in(execute)
    stuck = add(home, "ada", "takes long")
    others = [add(home, "bob", f"fact {i}") for i in range(4)]
    serving = server(home, concurrency=2)
    thread = threading.Thread(target=serving.serve)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not all(by_id(home)[t].state == "done" for t in others):
            assert time.monotonic() < deadline, by_id(home)
            time.sleep(0.05)
        assert by_id(home)[stuck].state == "running"
    finally:
        release.set()
        thread.join(30)
    assert not thread.is_alive()
    found = by_id(home)
    assert {t.state for t in found.values()} == {"done"}
    assert {t.checkpoint for t in found.values()} == {"integrated"}
    assert len({t.run_id for t in found.values()}) == 5


def test_a_task_without_disk_space_goes_back_to_the_queue(
    home: Home, stand_in: Callable[[Execute], None]
) -> None:
    def execute(ctx: RunContext, request: RunRequest) -> RunOutcome:
        raise DiskSpaceError("the data root is full")

    stand_in(execute)
    task = add(home, "ada", "waits for space")
    status = server(home, concurrency=1).serve()
    found = by_id(home)[task]
    assert (found.state, found.started_at, found.run_id) == ("queued", None, None)
    assert status.queued == 1
    (requeued,) = Journal(home.journal).read(event="task.requeued")
    assert requeued["task"] == task


def test_a_failed_run_is_recorded_with_its_error(
    home: Home, stand_in: Callable[[Execute], None]
) -> None:
    def execute(ctx: RunContext, request: RunRequest) -> RunOutcome:
        raise RuntimeError("a bug")

    stand_in(execute)
    task = add(home, "ada", "fails")
    status = server(home, concurrency=1).serve()
    found = by_id(home)[task]
    assert (found.state, found.checkpoint) == ("failed", None)
    assert found.error == "unexpected RuntimeError: a bug"
    assert status.counts["failed"] == 1


def test_serve_journals_through_one_group_commit(home: Home) -> None:
    made = server(home, concurrency=1)
    assert isinstance(made.ctx.journal, GroupJournal)
    assert made.ctx.journal.path == home.journal


def test_a_recent_good_ping_vouches_for_the_engine_a_failed_one_never(home: Home) -> None:
    ctx = RunContext(settings=load_settings(home.root), journal=Journal(home.journal))
    made = Server(ctx, concurrency=1, once=True, gc_interval_seconds=3600)
    pings: list[str] = []
    down = False

    def ping() -> None:
        pings.append("ping")
        if down:
            raise EngineError("connection refused")

    made._ping = ping  # type: ignore[method-assign]
    assert made._engine_ok() and made._engine_ok()
    assert len(pings) == 1
    made._engine_seen_at = time.monotonic() - ENGINE_FRESH_SECONDS
    down = True
    assert not made._engine_ok() and not made._engine_ok()
    assert len(pings) == 3 and made.status.engine_down
    down = False
    assert made._engine_ok() and not made.status.engine_down
    assert len(pings) == 4


def test_endings_and_claims_share_one_transaction(home: Home) -> None:
    """A turn's write is all or nothing: a host that dies in it leaves the queue as it was
    (recovery settles the ended run's task from its manifest)."""
    first, second, third = (add(home, "ada", f"fact {i}") for i in range(3))
    ending = tasks.Ending(first, checkpoint="integrated", run_id=run_id(1))
    with opened(home.db) as conn:
        assert tasks.claim_next(conn, set()) == tasks.get(conn, first)
        with pytest.raises(RuntimeError), transaction(conn):
            tasks.record_endings(conn, [ending])
            assert len(tasks.claim(conn, 2, set())) == 2
            raise RuntimeError("the host died mid-turn")
        assert [t.state for t in tasks.list_tasks(conn)] == ["running", "queued", "queued"]
        with transaction(conn):
            tasks.record_endings(conn, [ending])
            claimed = tasks.claim(conn, 2, set())
        assert [t.id for t in claimed] == [second, third]
        assert [t.state for t in tasks.list_tasks(conn)] == ["done", "running", "running"]


def test_a_slot_is_a_box_and_endings_are_bounded(
    home: Home, stand_in: Callable[[Execute], None]
) -> None:
    """With one slot, the next task starts once the last box exits, while that run is still
    integrating; but no more runs integrate at once than there are slots."""
    release = threading.Event()
    started: list[str] = []
    numbers = iter(range(1, 100))

    def execute(ctx: RunContext, request: RunRequest) -> RunOutcome:
        started.append(request.prompt)
        done = outcome(request, next(numbers))
        assert ctx.on_box_exited is not None
        ctx.on_box_exited(done.manifest)  # the box is done; the ending takes its time
        assert release.wait(60)
        return done

    stand_in(execute)
    ids = [add(home, "ada", prompt) for prompt in ("first", "second", "third")]
    serving = server(home, concurrency=1)
    thread = threading.Thread(target=serving.serve)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while len(started) < 2:
            assert time.monotonic() < deadline, started
            time.sleep(0.02)
        time.sleep(0.3)  # a few turns of the loop: the third must still wait
        assert started == ["first", "second"]
    finally:
        release.set()
        thread.join(30)
    assert not thread.is_alive()
    assert started == ["first", "second", "third"]
    assert {by_id(home)[t].state for t in ids} == {"done"}
