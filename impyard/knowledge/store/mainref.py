"""Which commit an imp's main names, read from the ref's own file.

A run needs its base before its box starts, and nothing else of Git until the box
exits. Reading ``refs/heads/main`` (or its line in ``packed-refs``, where ``git
pack-refs`` moved it) is two small file reads; opening the repository with pygit2
first costs its import (libgit2, and every CA certificate it loads at import). Only
the host writes main, always through libgit2, which replaces the loose file by an
atomic rename: a reader sees the old commit or the new one. Anything else (a symbolic
ref, a file that is not one object id) is left to pygit2 to read, through ``repo``.
"""

from __future__ import annotations

import re
from pathlib import Path

from impyard.common.errors import KnowledgeError
from impyard.knowledge.store.refnames import MAIN

_OID = re.compile(r"[0-9a-f]{40}")


def read_main(repo_path: Path) -> str:
    """The commit id main names in the bare repository at ``repo_path``."""
    loose = _read(repo_path / MAIN)
    if loose is not None:
        value = loose.strip()
        if _OID.fullmatch(value):
            return value
        return _with_pygit2(repo_path)
    packed = _read(repo_path / "packed-refs")
    for line in (packed or "").splitlines():
        oid, _, name = line.partition(" ")
        if name == MAIN and _OID.fullmatch(oid):
            return oid
    return _with_pygit2(repo_path)


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="ascii")
    except (FileNotFoundError, NotADirectoryError):
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise KnowledgeError(f"cannot read {path}: {exc}") from exc


def _with_pygit2(repo_path: Path) -> str:
    # Imported here, not above: loading pygit2 is the cost this module exists to avoid.
    from impyard.knowledge.store.repo import main_commit, open_repo_at

    return main_commit(open_repo_at(repo_path))
