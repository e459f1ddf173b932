"""What `impyard run` checks before anything is created (no engine needed for these)."""

from __future__ import annotations

import sqlite3

from tests.helpers.cli import Cli


def test_a_persistent_database_error_is_reported_not_retried_forever(cli: Cli) -> None:
    """Only a namespace clash is drawn again; a database that refuses every insert (here a
    broken trigger, as a corrupt or read-only file would) is one clear error."""
    assert cli("init").code == 0
    assert cli("imp", "create", "yuko").code == 0
    conn = sqlite3.connect(cli.home / "impyard.db", isolation_level=None)
    conn.execute("CREATE TABLE gone (x)")
    conn.execute(
        "CREATE TRIGGER broken BEFORE INSERT ON namespaces BEGIN INSERT INTO gone VALUES (1); END"
    )
    conn.execute("DROP TABLE gone")
    conn.close()
    result = cli("run", "yuko", "--prompt", "p", "--command", "true", timeout=30)
    assert result.code == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "cannot record the run's namespace in the database: no such table" in lines[0]
    assert not list((cli.home / "runs").iterdir())
