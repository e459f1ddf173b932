"""The ``impyard serve`` worker: recover, then run queued tasks up to N boxes at once.

A slot is a box: a run holds one from its claim until its box exits, and is then
integrated (or quarantined) outside it, so the next task prepares and starts its box
while the last one lands. At most N runs are past their box at once, so endings that
fall behind hold claiming back instead of piling up.

It sits above the runs it drives, the periodic gc and backups (``impyard.queue`` is only
the store it reads), and admits every task with ``admission.execute``, as ``run`` does.
Only the main thread writes the queue, through one connection: each turn of its loop
records how the runs that ended meanwhile went and claims tasks for the free slots, in
one transaction, so run threads never queue for the database's write lock. A run's
manifest is final before its task's ending is written: a serve that dies before the
turn leaves tasks that recovery settles from those manifests.
Shutdown: the first SIGINT/SIGTERM stops dequeuing and lets running boxes
finish for the grace period, then kills them (their runs are quarantined,
never integrated half-done); a second signal kills at once.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor

from impyard import backup
from impyard.common.errors import EngineError, ImpyardError, LeaseHeldError
from impyard.journal.log import Journal
from impyard.journal_group import GroupJournal
from impyard.knowledge.checkouts.runspace import DiskSpaceError
from impyard.queue import leases, tasks
from impyard.queue.db import opened, transaction
from impyard.retention.model import GcResult
from impyard.retention.periodic import PeriodicGc
from impyard.runs.drive.context import RunContext
from impyard.runs.host.admission import execute
from impyard.runs.host.recovery import Resolution, recover_all
from impyard.runs.provision import rework
from impyard.runs.records.manifest import read_or_none
from impyard.runs.records.model import Manifest, RunRequest
from impyard.serve import events as serve_events
from impyard.serve import heap
from impyard.serve.events import EventKind, Reporter, ServeEvent, ServeStatus
from impyard.serve.stoppable import recover_on_thread, unless_stopped

__all__ = ["ServeEvent", "ServeStatus", "Server"]

log = logging.getLogger(__name__)

ENGINE_RETRY_SECONDS = (1.0, 2.0, 5.0, 10.0)
DISK_RETRY_SECONDS = 10.0
#: A ping this recent vouches for the engine: claiming after every finished run does not
#: wait for another round trip to the engine (a busy engine answers in tens of ms).
ENGINE_FRESH_SECONDS = 1.0


class Server:
    def __init__(
        self,
        ctx: RunContext,
        concurrency: int,
        once: bool,
        report: Reporter | None = None,
        gc_interval_seconds: float | None = None,
    ) -> None:
        """``gc_interval_seconds`` None: the deployed ``retention.gc_interval_seconds``."""
        self.ctx = ctx
        self.concurrency = concurrency
        self.once = once
        self.report_cb = report
        self.status = ServeStatus()
        self._lock = threading.Lock()
        self._boxes: dict[str, Manifest] = {}  # run id -> manifest of a running box
        #: The run of each task whose box started (a failed task's line names it).
        self._task_runs: dict[str, str] = {}
        #: True while recovery runs: a box it reports started was re-attached.
        self._recovering = False
        self._stop = threading.Event()
        self._kill_now = threading.Event()
        self._deadline: float | None = None
        #: Until when no task is claimed because the data root is too full (monotonic).
        self._disk_wait_until = 0.0
        self._engine_failures = 0
        self._engine_seen_at: float | None = None  # monotonic time of the last good ping
        #: Tasks whose box has exited while their run is still ending (out of its slot).
        self._past_box: set[str] = set()
        #: Set when a box exits or a run ends: the loop has a slot to fill or an ending to
        #: record.
        self._wake = threading.Event()
        self._cycles = heap.CycleCollector()
        if type(ctx.journal) is Journal:
            # Runs of every imp journal at once here: let records made together share their
            # write and fsync instead of queueing for the journal's lock one by one.
            ctx.journal = GroupJournal(ctx.journal.path)
        self.ctx.on_box_started = self._box_started
        self.ctx.on_box_exited = self._box_exited
        self.gc = PeriodicGc(
            ctx.home,
            ctx.journal,
            interval_seconds=gc_interval_seconds,
            on_result=self._gc_done,
            on_error=lambda message: self.report("gc", message),
        )

    # -- signals (called on the signals thread, never in a handler: this takes locks) --

    def request_stop(self, by: str = "a stop request") -> None:
        """``by``: what asked (a signal's name), for the stop line."""
        if self._stop.is_set():
            self._kill_now.set()
            self.report("stopping", "second signal: killing running boxes now")
            return
        self._deadline = time.monotonic() + self.ctx.settings.shutdown_grace_seconds
        self._stop.set()
        self._wake.set()  # a loop waiting for its running boxes sees the stop at once
        self.status.stopping = True
        self.status.stopped_by = by
        self.report(
            "stopping",
            f"stopping: no new tasks; {self.status.running} running box(es) get "
            f"{self.ctx.settings.shutdown_grace_seconds:g}s to finish",
        )

    # -- reporting ----------------------------------------------------------------------

    def report(self, kind: EventKind, message: str) -> None:
        self.emit(ServeEvent(kind, message))

    def emit(self, event: ServeEvent) -> None:
        if self.report_cb is not None:
            self.report_cb(event, self.status)

    def _box_started(self, manifest: Manifest) -> None:
        if manifest.container_id:
            with self._lock:
                self._boxes[manifest.run_id] = manifest
                if manifest.task_id is not None and not self._recovering:
                    self._task_runs[manifest.task_id] = manifest.run_id
        self.emit(serve_events.box_started(manifest, reattached=self._recovering))
        if self._kill_now.is_set() and manifest.container_id:
            self.ctx.killed_runs.add(manifest.run_id)
            self._kill(manifest.container_id, manifest)

    def _box_exited(self, manifest: Manifest) -> None:
        if manifest.task_id is not None:
            with self._lock:
                self._past_box.add(manifest.task_id)
        self._wake.set()

    def _free_slots(self, running: dict[Future[tasks.Ending], tasks.Task]) -> int:
        """Boxes that may start now: N less the runs still before or in their box, and no
        more than N runs ending at once."""
        with self._lock:
            ending = sum(1 for task in running.values() if task.id in self._past_box)
        in_box = len(running) - ending
        return max(0, min(self.concurrency - in_box, 2 * self.concurrency - len(running)))

    # -- main loop ----------------------------------------------------------------------

    def serve(self) -> ServeStatus:
        heap.configure()  # before recovery and the run threads make their malloc arenas
        self._recover()
        if self._stop.is_set():
            return self.status
        self.gc.start()  # after recovery: it leaves no run unfinished that gc could judge
        # Catch up on pushes missed while no serve ran; failing remotes are retried meanwhile.
        backup.watch(self.ctx.home)
        running: dict[Future[tasks.Ending], tasks.Task] = {}
        with (
            opened(self.ctx.home.db) as conn,
            # N runs in their box, and as many more integrating after theirs exited.
            ThreadPoolExecutor(2 * self.concurrency, thread_name_prefix="impyard-run") as pool,
        ):
            while True:
                self._enforce_deadline()
                endings = self._collect(running)
                if endings:
                    self._cycles.after_runs_ended()
                disk_ok = time.monotonic() >= self._disk_wait_until
                slots = self._free_slots(running)
                wanted = not self._stop.is_set() and disk_ok and slots > 0
                # The engine is asked only when there is something to claim.
                wanted = wanted and tasks.count(conn, "queued") > 0
                engine_ok = not wanted or self._engine_ok()
                claimed = self._turn(conn, endings, slots if wanted and engine_ok else 0)
                for task in claimed:
                    future = pool.submit(self._run_task, task)
                    future.add_done_callback(lambda _done: self._wake.set())
                    running[future] = task
                self._refresh(conn, len(running))
                if not engine_ok:
                    self._engine_backoff()
                    continue
                if not running and (self._stop.is_set() or self._idle(conn, disk_ok)):
                    break
                if running:
                    # Any state change before the clear is seen by the next turn.
                    self._wake.wait(0.5)
                    self._wake.clear()
                else:
                    self._stop.wait(0.5)
            self._refresh(conn, 0)
        # A gc in progress gets what is left of the grace, never a grace of its own.
        grace = self.ctx.settings.shutdown_grace_seconds
        self.gc.stop(grace if self._deadline is None else self._deadline - time.monotonic())
        return self.status

    def _collect(self, running: dict[Future[tasks.Ending], tasks.Task]) -> list[tasks.Ending]:
        """How the runs that ended since the last turn went (their futures leave ``running``)."""
        endings = []
        for future in [f for f in running if f.done()]:
            task = running.pop(future)
            with self._lock:
                self._past_box.discard(task.id)
            endings.append(future.result())  # a BaseException from a run thread ends serve
        return endings

    def _turn(
        self, conn: sqlite3.Connection, endings: list[tasks.Ending], slots: int
    ) -> list[tasks.Task]:
        """Record ``endings`` and claim up to ``slots`` tasks: one write transaction."""
        if not endings and not slots:
            return []
        with transaction(conn):
            tasks.record_endings(conn, endings)
            return tasks.claim(conn, slots, self._reorganize_blocked(conn)) if slots else []

    def _idle(self, conn: sqlite3.Connection, disk_ok: bool) -> bool:
        """``--once`` with nothing left it could claim now."""
        return self.once and (not disk_ok or not self._claimable(conn))

    def _recover(self) -> None:
        """Resolve unfinished runs before new work, on a thread (``recover_on_thread``), so
        that shutdown signals and the grace deadline reach boxes recovery re-attached to,
        as they reach new ones."""

        def recover() -> None:
            try:
                recover_all(self.ctx, self._recovered)
            finally:
                self._recovering = False

        self._recovering = True
        recover_on_thread(
            recover,
            each_turn=self._enforce_deadline,
            may_leave=lambda: self._stop.is_set() and self._nothing_to_outwait(),
        )

    def _nothing_to_outwait(self) -> bool:
        """No box re-attached by recovery is running, or the grace is over."""
        with self._lock:
            attached = bool(self._boxes)
        late = self._deadline is not None and time.monotonic() >= self._deadline
        return not attached or late

    def _gc_done(self, result: GcResult) -> None:
        heap.trim()  # what the runs since the last pass freed, back to the system
        if result.with_status("removed", "rotated", "folded", "failed"):
            self.report("gc", result.summary())

    def _recovered(self, resolution: Resolution) -> None:
        self._forget(resolution.run_id)
        self.status.counts[resolution.checkpoint] += 1
        found = read_or_none(self.ctx.home, resolution.run_id)
        self.emit(serve_events.recovered(resolution, found))

    def _reorganize_blocked(self, conn: sqlite3.Connection) -> set[str]:
        """Imps whose reorganize tasks must wait: a live lease, or one already running."""
        ttl = self.ctx.settings.lease_ttl_seconds
        return leases.held_imps(conn, ttl) | tasks.running_reorganize_imps(conn)

    def _claimable(self, conn: sqlite3.Connection) -> bool:
        blocked = self._reorganize_blocked(conn)
        queued = tasks.list_tasks(conn, "queued")
        return any(not (t.reorganize and t.imp in blocked) for t in queued)

    def _refresh(self, conn: sqlite3.Connection, running: int) -> None:
        queued = tasks.count(conn, "queued")
        changed = (self.status.running, self.status.queued) != (running, queued)
        self.status.running, self.status.queued = running, queued
        if changed:
            self.report("status", "")

    def _engine_ok(self) -> bool:
        """Whether the engine answers (or did within ``ENGINE_FRESH_SECONDS``)."""
        now = time.monotonic()
        if self._engine_seen_at is not None and now - self._engine_seen_at < ENGINE_FRESH_SECONDS:
            return True
        try:
            self._ping()
        except EngineError as exc:
            self._engine_seen_at = None
            if not self.status.engine_down:
                self.report("engine", f"engine unreachable, waiting: {exc}")
            self.status.engine_down = True
            return False
        if self._stop.is_set():
            return False  # the ping may not have answered: a stop claims nothing anyway
        self._engine_seen_at = time.monotonic()
        self._engine_failures = 0
        if self.status.engine_down:
            self.report("engine", "engine reachable again")
            self.status.engine_down = False
        return True

    def _ping(self) -> None:
        """Raises EngineError; returns early, unanswered, when a stop comes first."""
        from impyard.box.docker import engine

        unless_stopped(self._stop, "impyard-ping", lambda: engine.call("ping", engine.api().ping))

    def _engine_backoff(self) -> None:
        """A lost engine makes serve wait and retry, never exit: step by step while it stays
        down (1, 2, 5, then every 10 s)."""
        wait = ENGINE_RETRY_SECONDS[min(self._engine_failures, len(ENGINE_RETRY_SECONDS) - 1)]
        self._engine_failures += 1
        self._stop.wait(wait)

    def _enforce_deadline(self) -> None:
        late = self._deadline is not None and time.monotonic() >= self._deadline
        if self._kill_now.is_set() or late:
            with self._lock:
                boxes = list(self._boxes.items())
            for run_id, box in boxes:
                if run_id in self.ctx.killed_runs or box.container_id is None:
                    continue
                self.ctx.killed_runs.add(run_id)  # before the kill: its exit must not integrate
                self.emit(serve_events.killing(box))
                self._kill(box.container_id, box)

    def _kill(self, container_id: str, manifest: Manifest | None = None) -> None:
        from impyard.box.launcher.launch import kill_box

        try:
            if manifest is not None and manifest.node and self.ctx.kill_remote is not None:
                self.ctx.kill_remote(manifest.run_id)  # its node stops it
                return
            kill_box(container_id)
        except ImpyardError as exc:
            log.warning("could not kill %s: %s", container_id, exc)

    # -- one task -----------------------------------------------------------------------

    def _run_task(self, task: tasks.Task) -> tasks.Ending:
        """Drive one task's run; how it ended is written by the main thread's next turn."""
        request = RunRequest(
            imp=task.imp,
            prompt=task.prompt,
            reorganize=task.reorganize,
            channel=task.channel,
            task_id=task.id,
            rework=rework.origin_of(task),
        )
        try:
            outcome = execute(self.ctx, request)
        except DiskSpaceError as exc:
            # Nothing of the run exists yet: the task waits, and so does claiming.
            self._disk_wait_until = time.monotonic() + DISK_RETRY_SECONDS
            self.ctx.journal.record("task.requeued", task=task.id, imp=task.imp, reason=str(exc))
            return self._requeue(task, f"disk space: {exc}")
        except LeaseHeldError as exc:
            return self._requeue(task, str(exc))
        except ImpyardError as exc:
            return self._failed(task, str(exc))
        except Exception as exc:  # a bug must not take the server down with other boxes
            log.exception("task %s failed unexpectedly", task.id)
            return self._failed(task, f"unexpected {type(exc).__name__}: {exc}")
        m = outcome.manifest
        self._forget(m.run_id, task.id)
        self.status.counts[m.checkpoint] += 1
        self.emit(serve_events.run_finished(m))
        if self.ctx.requeue_lost is not None and self.ctx.requeue_lost(m):
            return self._requeue(task, f"run {m.run_id} was lost with its node: queued again")
        return tasks.Ending(task.id, checkpoint=m.checkpoint, run_id=m.run_id)

    def _requeue(self, task: tasks.Task, why: str) -> tasks.Ending:
        self.emit(serve_events.task_ended_without_run(task.id, task.imp, None, "waiting", why))
        return tasks.Ending(task.id, requeue=True)

    def _failed(self, task: tasks.Task, error: str) -> tasks.Ending:
        """A task whose run ended with no outcome (or never began)."""
        with self._lock:
            run_id = self._task_runs.get(task.id)
        if run_id is not None:
            self._forget(run_id, task.id)
        self.status.counts["failed"] += 1
        self.emit(serve_events.task_ended_without_run(task.id, task.imp, run_id, "failed", error))
        return tasks.Ending(task.id, error=error)

    def _forget(self, run_id: str, task_id: str | None = None) -> None:
        with self._lock:
            self._boxes.pop(run_id, None)
            if task_id is not None:
                self._task_runs.pop(task_id, None)
