"""The one SQLite file (``impyard.db``): tasks, leases and issued namespaces.

WAL mode and a generous busy timeout make it safe for the CLI and a running
``serve`` to write at once. Each caller opens its own connection. A reader that
must answer fast whatever holds the file (``status``) passes a short busy timeout
and tells a lock from other failures with ``is_locked``.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path

#: Seconds a connection waits for a lock another connection holds (SQLite's busy timeout).
BUSY_TIMEOUT_SECONDS = 30.0

SCHEMA = """
CREATE TABLE IF NOT EXISTS tasks (
    id          TEXT PRIMARY KEY,
    imp         TEXT NOT NULL,
    prompt      TEXT NOT NULL,
    reorganize  INTEGER NOT NULL DEFAULT 0,
    channel     TEXT,
    state       TEXT NOT NULL,
    created_at  TEXT NOT NULL,
    seq         INTEGER NOT NULL,
    started_at  TEXT,
    finished_at TEXT,
    run_id      TEXT,
    checkpoint  TEXT,
    error       TEXT,
    rework_of      TEXT,
    rework_root    TEXT,
    rework_attempt INTEGER,
    rework         TEXT,
    filed_by       TEXT
);
CREATE INDEX IF NOT EXISTS tasks_state_seq ON tasks(state, seq);
CREATE TABLE IF NOT EXISTS leases (
    imp          TEXT PRIMARY KEY,
    holder       TEXT NOT NULL,
    acquired_at  REAL NOT NULL,
    heartbeat_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS namespaces (
    namespace TEXT PRIMARY KEY,
    imp       TEXT NOT NULL,
    run_id    TEXT NOT NULL UNIQUE
);
"""

#: Columns added to ``tasks`` since it was first created, added to an older file as it is
#: opened. A rework task names the run it reworks (``rework_of``), the first task of its
#: chain (``rework_root``), how many reworks the chain holds with it (``rework_attempt``)
#: and what it starts from (``rework``, JSON). A task a run filed through ``impyard-task``
#: names that run (``filed_by``).
ADDED_TASK_COLUMNS = (
    ("rework_of", "TEXT"),
    ("rework_root", "TEXT"),
    ("rework_attempt", "INTEGER"),
    ("rework", "TEXT"),
    ("filed_by", "TEXT"),
)


@contextlib.contextmanager
def opened(
    path: Path, *, busy_timeout: float = BUSY_TIMEOUT_SECONDS
) -> Iterator[sqlite3.Connection]:
    """A connection for one piece of work, closed after it."""
    conn = connect(path, busy_timeout=busy_timeout)
    try:
        yield conn
    finally:
        conn.close()


@contextlib.contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """BEGIN IMMEDIATE (the write lock up front, so a read-then-write cannot be raced),
    COMMIT on success, ROLLBACK on anything else."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def connect(path: Path, *, busy_timeout: float = BUSY_TIMEOUT_SECONDS) -> sqlite3.Connection:
    conn = sqlite3.connect(
        path, timeout=busy_timeout, isolation_level=None, check_same_thread=False
    )
    try:
        conn.row_factory = sqlite3.Row
        conn.execute(f"PRAGMA busy_timeout={int(busy_timeout * 1000)}")
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.executescript(SCHEMA)
        migrate(conn)
    except BaseException:
        conn.close()  # a locked file fails here: the connection must not leak
        raise
    return conn


def migrate(conn: sqlite3.Connection) -> None:
    """Add the columns an older ``tasks`` table lacks. Checked and altered under the write
    lock, so two processes opening an old file at once add each column once."""
    index = "SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = 'tasks_rework_of'"
    if not _missing_columns(conn) and conn.execute(index).fetchone():
        return
    with transaction(conn):
        for name, kind in _missing_columns(conn):
            conn.execute(f"ALTER TABLE tasks ADD COLUMN {name} {kind}")
        conn.execute("CREATE INDEX IF NOT EXISTS tasks_rework_of ON tasks(rework_of)")


def _missing_columns(conn: sqlite3.Connection) -> list[tuple[str, str]]:
    have = {str(row[1]) for row in conn.execute("PRAGMA table_info(tasks)")}
    return [(name, kind) for name, kind in ADDED_TASK_COLUMNS if name not in have]


def is_locked(exc: sqlite3.Error) -> bool:
    """Whether ``exc`` says another connection held the file past the busy timeout (a
    writer in exclusive locking mode blocks even WAL readers), not that it is unreadable."""
    # The extended code (SQLITE_BUSY_RECOVERY, ...) keeps the primary one in its low byte.
    code = getattr(exc, "sqlite_errorcode", None)
    return code is not None and code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
