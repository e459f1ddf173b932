"""The task queue: what owners ask imps to do, in order."""

from __future__ import annotations

import json
import secrets
import sqlite3
from dataclasses import dataclass
from typing import Any, Literal

from impyard.common.errors import NotFoundError, UsageError
from impyard.common.names import check_channel, utc_now
from impyard.home import Home
from impyard.queue.db import opened, transaction

#: ``done``: its run ended (landed, empty, rejected, conflict or quarantined); ``failed``:
#: no run outcome (refused before a box started, or the run broke off), its ``error`` says
#: why, and ``retry`` queues it again.
TaskState = Literal["queued", "running", "done", "failed", "cancelled"]
TASK_STATES: tuple[str, ...] = ("queued", "running", "done", "failed", "cancelled")
#: The states a task leaves only when the owner retries it; gc removes one once it is old
#: enough.
FINISHED_STATES: tuple[str, ...] = ("done", "failed", "cancelled")
#: Queued tasks a claim reads at a time.
CLAIM_PAGE = 64


@dataclass(frozen=True)
class Task:
    id: str
    imp: str
    prompt: str
    reorganize: bool
    channel: str | None
    state: str
    created_at: str
    started_at: str | None
    finished_at: str | None
    run_id: str | None
    checkpoint: str | None
    error: str | None
    #: A rework task: the run it reworks, the first task of its chain, how many reworks
    #: the chain holds up to this one, and what it starts from (see ``runs.provision.rework``).
    rework_of: str | None = None
    rework_root: str | None = None
    rework_attempt: int | None = None
    rework: dict[str, Any] | None = None
    #: The tainted run that filed this task through ``impyard-task`` (it runs clean).
    filed_by: str | None = None

    @classmethod
    def from_row(cls, row: sqlite3.Row) -> Task:
        return cls(
            id=row["id"],
            imp=row["imp"],
            prompt=row["prompt"],
            reorganize=bool(row["reorganize"]),
            channel=row["channel"],
            state=row["state"],
            created_at=row["created_at"],
            started_at=row["started_at"],
            finished_at=row["finished_at"],
            run_id=row["run_id"],
            checkpoint=row["checkpoint"],
            error=row["error"],
            rework_of=row["rework_of"],
            rework_root=row["rework_root"],
            rework_attempt=row["rework_attempt"],
            rework=json.loads(row["rework"]) if row["rework"] else None,
            filed_by=row["filed_by"],
        )

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def new_task_id() -> str:
    return f"task-{secrets.token_hex(6)}"


@dataclass(frozen=True)
class ReworkLink:
    """Where a rework task sits in its chain: the run it reworks, the chain's first task
    (None: this task starts the chain), its attempt number, and what it starts from."""

    of: str
    root: str | None
    attempt: int
    details: dict[str, Any]


def add(
    conn: sqlite3.Connection,
    imp: str,
    prompt: str,
    *,
    reorganize: bool = False,
    channel: str | None = None,
    rework: ReworkLink | None = None,
    filed_by: str | None = None,
) -> Task:
    with transaction(conn):
        return add_in(
            conn,
            imp,
            prompt,
            reorganize=reorganize,
            channel=channel,
            rework=rework,
            filed_by=filed_by,
        )


def add_in(
    conn: sqlite3.Connection,
    imp: str,
    prompt: str,
    *,
    reorganize: bool = False,
    channel: str | None = None,
    rework: ReworkLink | None = None,
    filed_by: str | None = None,
) -> Task:
    """``add`` inside the caller's transaction (one that read what decides the add)."""
    if not prompt.strip():
        raise UsageError("the task prompt is empty")
    check_channel(channel)
    task_id = new_task_id()
    link: tuple[str | None, str | None, int | None, str | None] = (None, None, None, None)
    if rework is not None:
        details = json.dumps(rework.details, sort_keys=True)
        link = (rework.of, rework.root or task_id, rework.attempt, details)
    seq = conn.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM tasks").fetchone()[0]
    conn.execute(
        "INSERT INTO tasks (id, imp, prompt, reorganize, channel, state, created_at, seq,"
        " rework_of, rework_root, rework_attempt, rework, filed_by)"
        " VALUES (?, ?, ?, ?, ?, 'queued', ?, ?, ?, ?, ?, ?, ?)",
        (task_id, imp, prompt, int(reorganize), channel, utc_now(), seq, *link, filed_by),
    )
    return get(conn, task_id)


def filed_by(conn: sqlite3.Connection, run_id: str) -> list[Task]:
    """The tasks run ``run_id`` filed through ``impyard-task``, oldest first."""
    rows = conn.execute("SELECT * FROM tasks WHERE filed_by = ? ORDER BY seq", (run_id,))
    return [Task.from_row(row) for row in rows.fetchall()]


def reworks_of(conn: sqlite3.Connection, run_id: str) -> list[Task]:
    """The rework tasks queued for ``run_id``, oldest first."""
    rows = conn.execute("SELECT * FROM tasks WHERE rework_of = ? ORDER BY seq", (run_id,))
    return [Task.from_row(row) for row in rows.fetchall()]


def reworked_by(home: Home, run_id: str) -> list[dict[str, Any]]:
    """The rework tasks of ``run_id`` and their runs, oldest first (what the queue still
    holds: gc removes old finished tasks)."""
    with opened(home.db) as conn:
        found = reworks_of(conn, run_id)
    return [
        {"task": t.id, "run": t.run_id, "state": t.state, "checkpoint": t.checkpoint} for t in found
    ]


def find(conn: sqlite3.Connection, task_id: str) -> Task | None:
    """The task, or None when there is none (any more: gc removes old finished ones)."""
    row = conn.execute("SELECT * FROM tasks WHERE id = ?", (task_id,)).fetchone()
    return None if row is None else Task.from_row(row)


def get(conn: sqlite3.Connection, task_id: str) -> Task:
    row = conn.execute("SELECT * FROM tasks WHERE id = ?", (task_id,)).fetchone()
    if row is None:
        raise NotFoundError(f"no task {task_id!r}")
    return Task.from_row(row)


def list_tasks(conn: sqlite3.Connection, state: str | None = None) -> list[Task]:
    if state is not None and state not in TASK_STATES:
        raise UsageError(f"unknown task state {state!r}: choose from {', '.join(TASK_STATES)}")
    query = "SELECT * FROM tasks" + (" WHERE state = ?" if state else "") + " ORDER BY seq"
    rows = conn.execute(query, (state,) if state else ()).fetchall()
    return [Task.from_row(row) for row in rows]


def cancel(conn: sqlite3.Connection, task_id: str) -> Task:
    task = get(conn, task_id)
    cursor = conn.execute(
        "UPDATE tasks SET state = 'cancelled', finished_at = ? WHERE id = ? AND state = 'queued'",
        (utc_now(), task_id),
    )
    if cursor.rowcount != 1:
        raise UsageError(f"task {task_id} is {task.state}; only a queued task can be cancelled")
    return get(conn, task_id)


def claim_next(conn: sqlite3.Connection, skip_imps_for_reorganize: set[str]) -> Task | None:
    """Take the oldest queued task, passing over reorganize tasks whose imp's lease is held
    (they stay queued; no head-of-line blocking)."""
    with transaction(conn):
        claimed = claim(conn, 1, skip_imps_for_reorganize)
    return claimed[0] if claimed else None


def claim(conn: sqlite3.Connection, limit: int, skip_imps_for_reorganize: set[str]) -> list[Task]:
    """Inside the caller's transaction: take up to ``limit`` oldest queued tasks, passing
    over reorganize tasks of the imps in ``skip_imps_for_reorganize`` and of any imp whose
    reorganize task this call took (one at a time per imp)."""
    skip = set(skip_imps_for_reorganize)
    claimed: list[str] = []
    now = utc_now()
    after = -1
    # Page by page: a long queue is not read whole to claim a few tasks off its head.
    while len(claimed) < limit:
        rows = conn.execute(
            "SELECT id, imp, reorganize, seq FROM tasks WHERE state = 'queued' AND seq > ?"
            " ORDER BY seq LIMIT ?",
            (after, CLAIM_PAGE),
        ).fetchall()
        if not rows:
            break
        after = rows[-1]["seq"]
        for row in rows:
            if len(claimed) >= limit:
                break
            if row["reorganize"]:
                if row["imp"] in skip:
                    continue
                skip.add(row["imp"])
            conn.execute(
                "UPDATE tasks SET state = 'running', started_at = ? WHERE id = ?", (now, row["id"])
            )
            claimed.append(row["id"])
    return [get(conn, task_id) for task_id in claimed]


@dataclass(frozen=True)
class Ending:
    """What became of a claimed task: done (its run's checkpoint), failed (the error that
    kept it from one), or given back to the queue (``requeue``: its run never started)."""

    task_id: str
    checkpoint: str | None = None
    error: str | None = None
    run_id: str | None = None
    requeue: bool = False


def record_endings(conn: sqlite3.Connection, endings: list[Ending]) -> None:
    """Write each ending (``finish`` or ``requeue``); batch them in one transaction."""
    for ending in endings:
        if ending.requeue:
            requeue(conn, ending.task_id)
        else:
            finish(
                conn,
                ending.task_id,
                checkpoint=ending.checkpoint,
                error=ending.error,
                run_id=ending.run_id,
            )


def count(conn: sqlite3.Connection, state: str) -> int:
    return int(conn.execute("SELECT COUNT(*) FROM tasks WHERE state = ?", (state,)).fetchone()[0])


def counts(conn: sqlite3.Connection) -> dict[str, int]:
    """How many tasks are in each state; every state is named, zero included."""
    found = {state: 0 for state in TASK_STATES}
    for row in conn.execute("SELECT state, COUNT(*) AS n FROM tasks GROUP BY state"):
        found[str(row["state"])] = int(row["n"])
    return found


def oldest_queued_at(conn: sqlite3.Connection) -> str | None:
    """When the task waiting longest was added (None: nothing is queued)."""
    row = conn.execute(
        "SELECT created_at FROM tasks WHERE state = 'queued' ORDER BY seq LIMIT 1"
    ).fetchone()
    return None if row is None else str(row["created_at"])


def running_reorganize_imps(conn: sqlite3.Connection) -> set[str]:
    """Imps with a reorganize task running: a second one must wait for it."""
    rows = conn.execute("SELECT imp FROM tasks WHERE state = 'running' AND reorganize = 1")
    return {str(r["imp"]) for r in rows}


def finish(
    conn: sqlite3.Connection,
    task_id: str,
    *,
    checkpoint: str | None,
    error: str | None = None,
    run_id: str | None = None,
) -> None:
    """Done with its run's checkpoint, or failed with the ``error`` that kept it from one."""
    state = "failed" if checkpoint is None and error is not None else "done"
    conn.execute(
        "UPDATE tasks SET state = ?, finished_at = ?, checkpoint = ?, error = ?,"
        " run_id = COALESCE(?, run_id) WHERE id = ?",
        (state, utc_now(), checkpoint, error, run_id, task_id),
    )


def retry(conn: sqlite3.Connection, task_id: str) -> Task:
    """Queue a failed task again, in its old place (its ``seq``); it returns the task as it
    was, so the caller can say what failed. Any other state is refused, named."""
    with transaction(conn):
        task = get(conn, task_id)
        if task.state != "failed":
            raise UsageError(f"task {task_id} is {task.state}; only a failed task can be retried")
        conn.execute(
            "UPDATE tasks SET state = 'queued', started_at = NULL, finished_at = NULL,"
            " error = NULL, checkpoint = NULL, run_id = NULL WHERE id = ?",
            (task_id,),
        )
    return task


def requeue(conn: sqlite3.Connection, task_id: str) -> None:
    """Give a claimed task back (its run never started, e.g. the lease was taken meanwhile)."""
    conn.execute(
        "UPDATE tasks SET state = 'queued', started_at = NULL, run_id = NULL WHERE id = ?",
        (task_id,),
    )


def finished_before(conn: sqlite3.Connection, cutoff: str) -> list[Task]:
    """Done or cancelled tasks whose ``finished_at`` is before ``cutoff``, oldest first.

    ``cutoff`` is a stamp as ``names.utc_now`` writes every ``finished_at``: fixed width
    and UTC, so text order is time order."""
    marks = ", ".join("?" for _ in FINISHED_STATES)
    rows = conn.execute(
        f"SELECT * FROM tasks WHERE state IN ({marks}) AND finished_at < ? ORDER BY finished_at",
        (*FINISHED_STATES, cutoff),
    ).fetchall()
    return [Task.from_row(row) for row in rows]


def delete_finished(conn: sqlite3.Connection, task_id: str) -> bool:
    """Delete a task only while it is done or cancelled; False when it is not (any more)."""
    marks = ", ".join("?" for _ in FINISHED_STATES)
    cursor = conn.execute(
        f"DELETE FROM tasks WHERE id = ? AND state IN ({marks})", (task_id, *FINISHED_STATES)
    )
    return cursor.rowcount == 1
