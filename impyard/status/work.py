"""What the host is doing: serve processes, the queue, unfinished runs and held leases."""

from __future__ import annotations

import json
import os
import sqlite3
from datetime import UTC, datetime

from impyard.common.names import RUN_ID
from impyard.home import Home
from impyard.queue import leases, tasks
from impyard.queue.db import is_locked, opened
from impyard.runs.records.model import TERMINAL_STATES
from impyard.serve.record import read_records
from impyard.status.model import (
    LeaseStatus,
    QueueSection,
    RunningRun,
    ServeProcess,
    ServeSection,
)
from impyard.status.units import age_seconds, iso


def serve_section(home: Home) -> ServeSection:
    records = read_records(home)
    live = [r for r in records if r.alive]
    return ServeSection(
        running=bool(live),
        processes=[
            ServeProcess(
                pid=r.pid,
                started_at=r.started_at,
                concurrency=r.concurrency,
                once=r.once,
                version=r.version,
            )
            for r in sorted(live, key=lambda r: (r.started_at or "", r.pid))
        ],
        stale_pids=sorted(r.pid for r in records if not r.alive),
    )


#: Seconds status waits for a queue database another process holds: the screen answers
#: within 2 s, where SQLite's usual busy timeout (30 s) made it hang.
DB_BUSY_TIMEOUT_SECONDS = 0.5


def queue_and_leases(
    home: Home, ttl_seconds: float, now: datetime
) -> tuple[QueueSection, list[LeaseStatus]]:
    try:
        with opened(home.db, busy_timeout=DB_BUSY_TIMEOUT_SECONDS) as conn:
            counts = tasks.counts(conn)
            oldest = tasks.oldest_queued_at(conn)
            rows = leases.list_leases(conn)
    except sqlite3.Error as exc:
        if is_locked(exc):
            error = (
                f"queue database locked: {home.db} is held by another process "
                f"(no answer within {DB_BUSY_TIMEOUT_SECONDS:g} s)"
            )
            return QueueSection(counts={}, error=error, locked=True), []
        return QueueSection(counts={}, error=f"{home.db}: {exc}"), []
    held = [
        LeaseStatus(
            imp=row.imp,
            holder=row.holder,
            acquired_at=iso(datetime.fromtimestamp(row.acquired_at, UTC)),
            heartbeat_age_seconds=max(0.0, now.timestamp() - row.heartbeat_at),
            live=now.timestamp() - row.heartbeat_at < ttl_seconds,
        )
        for row in rows
    ]
    return QueueSection(counts=counts, oldest_queued_at=oldest), held


def unfinished_runs(home: Home, now: datetime) -> list[RunningRun]:
    """Runs whose manifest is not finished: in a box, being checkpointed, or awaiting recovery.

    Reads each manifest as plain JSON: finished ones (nearly all) are skipped without
    building the full model."""
    if not home.runs_dir.is_dir():
        return []
    found: list[RunningRun] = []
    with os.scandir(home.runs_dir) as entries:
        for entry in entries:
            if not RUN_ID.fullmatch(entry.name):
                continue
            try:
                raw = json.loads((home.manifest(entry.name)).read_bytes())
            except (OSError, ValueError):
                continue  # a run being created has no manifest yet
            if not isinstance(raw, dict) or raw.get("state") in TERMINAL_STATES:
                continue
            since = raw.get("started_at") or raw.get("created_at")
            since = since if isinstance(since, str) else None
            found.append(
                RunningRun(
                    run_id=entry.name,
                    imp=str(raw.get("imp", "?")),
                    mode=raw.get("mode") if isinstance(raw.get("mode"), str) else None,
                    state=str(raw.get("state", "?")),
                    task_id=raw.get("task_id") if isinstance(raw.get("task_id"), str) else None,
                    since=since,
                    age_seconds=age_seconds(since, now),
                )
            )
    return sorted(found, key=lambda r: r.run_id)
