"""The exclusive per-imp reorganization lease.

A lease names its holder run and carries a heartbeat; a holder that stops
heartbeating (a dead host) loses the lease after the TTL, so it never blocks
an imp forever.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from impyard.common.errors import LeaseHeldError
from impyard.queue.db import opened, transaction


def acquire(conn: sqlite3.Connection, imp: str, holder: str, ttl_seconds: float) -> None:
    """Take the lease or raise LeaseHeldError naming the live holder."""
    now = time.time()
    with transaction(conn):
        row = conn.execute(
            "SELECT holder, heartbeat_at FROM leases WHERE imp = ?", (imp,)
        ).fetchone()
        if row is not None and row["holder"] != holder and now - row["heartbeat_at"] < ttl_seconds:
            raise LeaseHeldError(imp, row["holder"])
        conn.execute(
            "INSERT OR REPLACE INTO leases (imp, holder, acquired_at, heartbeat_at)"
            " VALUES (?, ?, ?, ?)",
            (imp, holder, now, now),
        )


def heartbeat(conn: sqlite3.Connection, imp: str, holder: str) -> bool:
    """Refresh the lease; False if the holder no longer has it."""
    cursor = conn.execute(
        "UPDATE leases SET heartbeat_at = ? WHERE imp = ? AND holder = ?",
        (time.time(), imp, holder),
    )
    return cursor.rowcount == 1


def release(conn: sqlite3.Connection, imp: str, holder: str) -> bool:
    cursor = conn.execute("DELETE FROM leases WHERE imp = ? AND holder = ?", (imp, holder))
    return cursor.rowcount == 1


def holder_of(conn: sqlite3.Connection, imp: str, ttl_seconds: float) -> str | None:
    row = conn.execute("SELECT holder, heartbeat_at FROM leases WHERE imp = ?", (imp,)).fetchone()
    if row is None or time.time() - row["heartbeat_at"] >= ttl_seconds:
        return None
    return str(row["holder"])


def expire_dead(conn: sqlite3.Connection, ttl_seconds: float) -> list[tuple[str, str]]:
    """Release leases whose holder stopped heartbeating; return (imp, holder) pairs."""
    cutoff = time.time() - ttl_seconds
    rows = conn.execute(
        "DELETE FROM leases WHERE heartbeat_at < ? RETURNING imp, holder", (cutoff,)
    ).fetchall()
    return [(str(r["imp"]), str(r["holder"])) for r in rows]


@dataclass(frozen=True)
class Lease:
    imp: str
    holder: str
    acquired_at: float
    heartbeat_at: float


def list_leases(conn: sqlite3.Connection) -> list[Lease]:
    """Every lease row, live or not yet expired by a serve (the caller judges the TTL)."""
    rows = conn.execute("SELECT imp, holder, acquired_at, heartbeat_at FROM leases ORDER BY imp")
    return [
        Lease(str(r["imp"]), str(r["holder"]), float(r["acquired_at"]), float(r["heartbeat_at"]))
        for r in rows
    ]


def held_imps(conn: sqlite3.Connection, ttl_seconds: float) -> set[str]:
    """Imps whose lease has a live holder."""
    cutoff = time.time() - ttl_seconds
    rows = conn.execute("SELECT imp FROM leases WHERE heartbeat_at >= ?", (cutoff,))
    return {str(r["imp"]) for r in rows}


class LeaseKeeper:
    """Heartbeats a held lease from a thread (its own connection) while the run's box runs."""

    def __init__(self, db: Path, imp: str, holder: str, interval: float) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._beat, args=(db, imp, holder, interval), name="lease", daemon=True
        )

    def _beat(self, db: Path, imp: str, holder: str, interval: float) -> None:
        with opened(db) as conn:
            while not self._stop.wait(interval):
                heartbeat(conn, imp, holder)

    def __enter__(self) -> LeaseKeeper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
