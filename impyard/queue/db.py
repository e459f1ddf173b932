"""The one SQLite file (``impyard.db``): tasks, leases and issued namespaces.

WAL mode and a generous busy timeout make it safe for the CLI and a running
``serve`` to write at once. Each caller opens its own connection.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

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
    error       TEXT
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


def connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, timeout=30.0, isolation_level=None, check_same_thread=False)
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA busy_timeout=30000")
    conn.executescript(SCHEMA)
    return conn
