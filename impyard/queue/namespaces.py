"""Issuing run identities: a run id and a record namespace, unique across the data root.

The namespace is the part of every record name a run may write, so it is registered in
the database before the run exists; the UNIQUE constraint makes a clash impossible to
miss. Only a clash is drawn again: any other database error (read-only, locked past the
busy timeout, corrupt) is reported, never retried in a loop.
"""

from __future__ import annotations

import sqlite3

from impyard.common import names
from impyard.common.errors import ImpyardError
from impyard.queue.db import transaction

#: 48 random bits per namespace: a clash is astronomically rare; several in a row mean
#: something else is wrong.
MAX_DRAWS = 5


def issue(conn: sqlite3.Connection, imp: str) -> tuple[str, str]:
    """A fresh (run id, namespace) pair, recorded as issued to ``imp``."""
    for _ in range(MAX_DRAWS):
        run_id, namespace = names.new_run_id(), names.new_namespace()
        try:
            with transaction(conn):
                conn.execute(
                    "INSERT INTO namespaces (namespace, imp, run_id) VALUES (?, ?, ?)",
                    (namespace, imp, run_id),
                )
        except sqlite3.IntegrityError as exc:
            if "UNIQUE" not in str(exc):
                raise _unusable(exc) from exc
            continue
        except sqlite3.Error as exc:
            raise _unusable(exc) from exc
        return run_id, namespace
    raise ImpyardError(f"could not draw an unused namespace in {MAX_DRAWS} attempts")


def _unusable(exc: sqlite3.Error) -> ImpyardError:
    return ImpyardError(f"cannot record the run's namespace in the database: {exc}")
