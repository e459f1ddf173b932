"""Keeping the published origin small in files: loose objects and small packs folded into
one pack now and then.

A one-note run publishes a handful of loose objects (its commit, a few trees, a blob),
each in a directory per id prefix. Nothing else would ever fold them away (the host runs
no ``git gc``), and a ready box's claim hard-links the whole origin into the box's run
space file by file, then deletes that copy after the run: measured under runsc with
serve running, 31 runs on one imp had left 160 files in 115 directories and the claim
took 29 ms instead of 12, with the deletion of the last box's copy taking 50 ms of CPU
beside the next run. So once the origin holds ``LOOSE_DIRS`` loose directories or
``SMALL_PACKS`` small packs, the lane writes those objects into one new durable pack
and only then deletes the loose files and the small packs. Callers hold the lane lock
(no other writer); readers are safe: git looks in new packs when an object is missing,
and a ready box's claim links the packs last (``runs.ready.claim``).
"""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

import pygit2

from impyard.common.fsutil import fsync_dir
from impyard.knowledge.store.packfile import PackWriter
from impyard.knowledge.store.packs import pack_object_ids

#: Loose-object directories (one per two-hex-digit id prefix) that start a fold. Counting
#: directories is one listing of ``objects``: while objects are few, each is mostly in a
#: directory of its own.
LOOSE_DIRS = 64
#: A pack smaller than this is folded with the loose objects (the lane's own packs of a
#: few runs); larger ones (a big run's snapshot) stay as they are.
SMALL_PACK_BYTES = 1 << 20
#: Small packs that start a fold even with few loose objects.
SMALL_PACKS = 16

_LOOSE_DIR = re.compile(r"[0-9a-f]{2}")
_LOOSE_FILE = re.compile(r"[0-9a-f]{38}")


@dataclass(frozen=True)
class Folded:
    """What one fold did: the new pack's name and what it replaced."""

    pack: str
    objects: int
    loose_files: int
    packs: int


def tidy_origin(origin: pygit2.Repository) -> Folded | None:
    """Fold the origin's loose objects and small packs into one pack once there are
    enough of them; None when there were not."""
    objects = Path(origin.path) / "objects"
    loose_dirs = _loose_dirs(objects)
    small = _small_packs(objects / "pack")
    if len(loose_dirs) < LOOSE_DIRS and len(small) < SMALL_PACKS:
        return None
    loose = [
        (directory, name)
        for directory in loose_dirs
        for name in _names(objects / directory)
        if _LOOSE_FILE.fullmatch(name)
    ]
    ids = list(dict.fromkeys(bytes.fromhex(directory + name) for directory, name in loose))
    for index in small:
        ids.extend(pack_object_ids(index, at_most=1 << 32) or [])
    ids = list(dict.fromkeys(ids))
    if not ids:
        return None
    writer = PackWriter(objects / "pack")
    try:
        for oid in ids:
            kind, data = origin.odb.read(pygit2.Oid(raw=oid))[:2]
            writer.add(kind, data, oid)
        name = writer.finish()  # durable before anything it replaces goes
    finally:
        writer.abort()
    origin.odb.exists(pygit2.Oid(raw=ids[0]))  # libgit2 looks for the new pack now
    for index in small:
        if index.stem == name:
            continue  # the same objects in the same order: the fold is that pack
        # The index first: a reader finds a pack only through it.
        with contextlib.suppress(FileNotFoundError):
            os.unlink(index)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(index.with_suffix(".pack"))
    for directory, file_name in loose:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(objects / directory / file_name)
    for directory in loose_dirs:
        with contextlib.suppress(OSError):  # not empty: an object written meanwhile
            os.rmdir(objects / directory)
    fsync_dir(objects / "pack")
    fsync_dir(objects)
    return Folded(name, len(ids), len(loose), len(small))


def _loose_dirs(objects: Path) -> list[str]:
    return [name for name in _names(objects) if _LOOSE_DIR.fullmatch(name)]


def _small_packs(packs: Path) -> list[Path]:
    """The indexes of the packs under ``SMALL_PACK_BYTES``."""
    found = []
    for name in _names(packs):
        if not (name.startswith("pack-") and name.endswith(".idx")):
            continue
        index = packs / name
        with contextlib.suppress(FileNotFoundError):
            if index.with_suffix(".pack").stat().st_size < SMALL_PACK_BYTES:
                found.append(index)
    return sorted(found)


def _names(directory: Path) -> list[str]:
    try:
        return os.listdir(directory)
    except (FileNotFoundError, NotADirectoryError):
        return []
