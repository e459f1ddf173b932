"""Interaction memory: ``memory/<imp>.jsonl``, the legacy ``notes/`` alias and the Memory block.

A separate system from knowledge: it never reads knowledge and knowledge never
reads it (SPEC, "Interaction memory remains separate").
"""

from __future__ import annotations

from impyard.memory.block import memory_block, render_block
from impyard.memory.entry import KINDS, MAX_TEXT_BYTES, Kind, MemoryEntry
from impyard.memory.migrate import Migration, migrate, migrate_all
from impyard.memory.select import select_entries
from impyard.memory.store import (
    Added,
    MemoryRead,
    MemoryWarning,
    add_entry,
    forget_entry,
    read_memory,
    require_imp,
)

__all__ = [
    "KINDS",
    "MAX_TEXT_BYTES",
    "Added",
    "Kind",
    "MemoryEntry",
    "MemoryRead",
    "MemoryWarning",
    "Migration",
    "add_entry",
    "forget_entry",
    "memory_block",
    "migrate",
    "migrate_all",
    "read_memory",
    "render_block",
    "require_imp",
    "select_entries",
]
