"""Compatibility: the knowledge-core helpers moved to ``tests.helpers.repo``.

Kept only for test modules that still import them from here; new code imports
``tests.helpers.repo``. Delete once nothing does.
"""

from __future__ import annotations

from tests.helpers.repo import (
    NS,
    OTHER_NS,
    RUN,
    assert_fsck_clean,
    change_of,
    make_imp,
    namespace,
    note,
    note_path,
    note_text,
    run_id,
    trailers,
    tree_paths,
)

__all__ = [
    "NS",
    "OTHER_NS",
    "RUN",
    "assert_fsck_clean",
    "change_of",
    "make_imp",
    "namespace",
    "note",
    "note_path",
    "note_text",
    "run_id",
    "trailers",
    "tree_paths",
]
