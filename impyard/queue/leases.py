"""The exclusive per-imp reorganization lease.

A lease names its holder run and carries a heartbeat; a holder that stops
heartbeating (a dead host) loses the lease after the TTL, so it never blocks
an imp forever.
"""

from __future__ import annotations

import sqlite3
import time

from impyard.errors import LeaseHeldError


def acquire(conn: sqlite3.Connection, imp: str, holder: str, ttl_seconds: float) -> None:
    """Take the lease or raise LeaseHeldError naming the live holder."""
    now = time.time()
    conn.execute("BEGIN IMMEDIATE")
    try:
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
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


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


def release_holder(conn: sqlite3.Connection, holder: str) -> list[str]:
    """Release every lease a (finished or dead) run holds; return the imps."""
    rows = conn.execute("DELETE FROM leases WHERE holder = ? RETURNING imp", (holder,)).fetchall()
    return [str(r["imp"]) for r in rows]
