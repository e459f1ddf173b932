"""Keeping a repository small in files: loose objects and small packs folded into one
pack now and then, in the published origin and in the canonical repository alike.

A one-note run leaves a small pack (its lane pass's commit and trees) and a loose blob
(its note, from its snapshot) in both. Nothing else would ever fold them away (the host
runs no ``git gc``). A ready box's claim hard-links the whole origin into the box's run
space file by file, then deletes that copy after the run: measured under runsc with
serve running, 31 runs on one imp had left 160 files in 115 directories (when a pass's
objects were loose too) and the claim took 29 ms instead of 12, with the deletion of
the last box's copy taking 50 ms of CPU beside the next run. The canonical repository
gained the same files a run for ever (half a million at 100,000 runs). So once a
repository holds ``LOOSE_DIRS`` loose directories (the canonical one: about 4,000
loose objects) or ``MAX_PACKS`` packs under ``FOLD_CAP``,
the lane writes the loose objects and the smaller packs into one new durable pack and
only then deletes what it replaced.

Which packs go with them is git's geometric rule (``git repack --geometric=2``): the
packs left behind each hold at least twice the next smaller one, so their number grows
with the logarithm of the repository's size, and each byte is rewritten a few times on
its way to ``FOLD_CAP``, not at every fold; a pack at the cap or over it (a big run's
snapshot), or holding ``FOLD_OBJECTS`` objects (a big imp's first publication), is never
rewritten. A pack is folded by copying its entries as stored, deltas and all.

Callers hold the lane lock. The origin has no other writer. The canonical repository
does: a run's checkpoint writes its snapshot's objects there before its run reaches the
lane. So there a fold deletes no emptied directory (a writer may be about to put an
object in it) and, its directories staying, estimates its loose objects from one of
them, as git does. (A snapshot's pack folded before its run lands is not linked into
the origin whole: its objects are copied there, as a small change's are.) Readers are
safe: git looks in new packs when an object is missing, and a ready box's claim and a
node's origin update take packs last.
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
from impyard.knowledge.store.packs import pack_object_count, pack_object_ids

#: Loose-object directories (one per two-hex-digit id prefix) that start a fold. Counting
#: directories is one listing of ``objects``: while objects are few, each is mostly in a
#: directory of its own.
LOOSE_DIRS = 64
#: Packs under ``FOLD_CAP`` that start a fold even with few loose objects.
MAX_PACKS = 16
#: Packs this large or larger, or holding this many objects or more, are never rewritten
#: by a fold: the geometric rule then keeps what one fold copies under about twice that
#: (copying entries as stored costs ~3 microseconds an object, the rest a few MB written).
FOLD_CAP = 16 << 20
FOLD_OBJECTS = 32_768
#: Where emptied directories stay (``keep_dirs``), counting directories would count
#: nothing; loose objects are then estimated as git's ``gc --auto`` does, from the files
#: of one directory (times 256), and a fold starts once it holds ``SAMPLED_LOOSE``
#: (~4,000 objects). Listing all 256 directories took 3.7 ms a pass.
SAMPLE_DIR = "17"
SAMPLED_LOOSE = 16

LOOSE_DIR = re.compile(r"[0-9a-f]{2}")
_LOOSE_FILE = re.compile(r"[0-9a-f]{38}")


@dataclass(frozen=True)
class Folded:
    """What one fold did: the new pack's name and what it replaced."""

    pack: str
    objects: int
    loose_files: int
    packs: int


def fold_objects(
    repo: pygit2.Repository, *, keep_dirs: bool = False, loose_budget: int | None = None
) -> Folded | None:
    """Fold the repository's loose objects and its smallest packs into one pack once there
    are enough of them; None when there were not. ``keep_dirs``: leave emptied
    loose-object directories (other writers), and estimate how many loose objects there
    are from ``SAMPLE_DIR``. ``loose_budget``: take at most about that many loose objects
    (each is read, compressed again and unlinked), ``SAMPLE_DIR`` last, so a backlog is
    folded a part a call until it is gone."""
    objects = Path(repo.path) / "objects"
    packs = _foldable_packs(objects / "pack")
    loose_dirs = _loose_dirs(objects)
    if keep_dirs:
        many_loose = sampled_loose(objects) >= SAMPLED_LOOSE
    else:
        many_loose = len(loose_dirs) >= LOOSE_DIRS
    if not many_loose and len(packs) < MAX_PACKS:
        return None
    loose = _loose_files(objects, loose_dirs, loose_budget)
    rolled = roll_up(sum(size for _, _, size in loose), packs)
    if not loose and len(rolled) < 2:
        return None  # the packs already grow geometrically
    loose_ids = [bytes.fromhex(directory + name) for directory, name, _ in loose]
    ids = list(loose_ids)
    for index in rolled:
        ids.extend(pack_object_ids(index, at_most=1 << 32) or [])
    ids = list(dict.fromkeys(ids))
    if not ids:
        return None
    name = _write_pack(repo, rolled, loose_ids)  # durable before anything it replaces goes
    held = set(pack_object_ids(objects / "pack" / f"{name}.idx", at_most=len(ids)) or ())
    if not held.issuperset(ids):
        # Never delete what the new pack does not hold (it would be gone from the repository).
        raise RuntimeError(f"fold: pack {name} lacks objects it was given")
    repo.odb.exists(pygit2.Oid(raw=ids[0]))  # libgit2 looks for the new pack now
    for index in rolled:
        if index.stem == name:
            continue  # the same objects in the same order: the fold is that pack
        # The index first: a reader finds a pack only through it.
        with contextlib.suppress(FileNotFoundError):
            os.unlink(index)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(index.with_suffix(".pack"))
    for directory, file_name, _ in loose:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(objects / directory / file_name)
    for directory in [] if keep_dirs else loose_dirs:
        with contextlib.suppress(OSError):  # not empty: an object written meanwhile
            os.rmdir(objects / directory)
    fsync_dir(objects / "pack")
    fsync_dir(objects)
    return Folded(name, len(ids), len(loose), len(rolled))


def sampled_loose(objects: Path) -> int:
    """The files in ``objects/SAMPLE_DIR``: about 1/256 of the repository's loose objects."""
    return len(_names(objects / SAMPLE_DIR))


def _write_pack(repo: pygit2.Repository, rolled: list[Path], loose: list[bytes]) -> str:
    """One durable pack of the ``rolled`` packs' objects and the ``loose`` ones in
    ``repo``; its name. A pack's entries are copied as stored (``PackWriter.copy_pack``):
    inflating and compressing each object again took 2.4 s for a fold of 107,000 objects
    at 100,000 records, inside a lane pass, and lost the lane's deltas (the fold's pack was
    59.6 MB; the packs listed shortly before it held 22.7 MB). Loose objects are written
    whole, as they were stored; libgit2's pack builder, which finds deltas, took 1.5 ms an
    object on the trees of a 100,000-record imp and halved the lane's rate of one-run
    passes."""
    writer = PackWriter(Path(repo.path) / "objects" / "pack")
    try:
        for index in rolled:
            writer.copy_pack(index)
        for oid in loose:
            if oid not in writer:
                kind, data = repo.odb.read(pygit2.Oid(raw=oid))[:2]
                writer.add(kind, data, oid)
        return writer.finish()
    finally:
        writer.abort()


def roll_up(loose_bytes: int, packs: list[tuple[Path, int]]) -> list[Path]:
    """The packs (index path, pack bytes) a fold takes beside ``loose_bytes`` of loose
    objects, as ``git repack --geometric=2`` chooses: every pack at or below the highest
    place where the sizes, in order, stop at least doubling; then each next pack while it
    is under twice what the fold holds."""
    ordered = sorted(packs, key=lambda pack: (pack[1], pack[0].name))
    split = 0
    for at in range(len(ordered) - 1, 0, -1):
        if ordered[at][1] < 2 * ordered[at - 1][1]:
            split = at + 1
            break
    held = loose_bytes + sum(size for _, size in ordered[:split])
    while split < len(ordered) and ordered[split][1] < 2 * held:
        held += ordered[split][1]
        split += 1
    return [index for index, _ in ordered[:split]]


def _loose_files(
    objects: Path, directories: list[str], budget: int | None
) -> list[tuple[str, str, int]]:
    """The loose objects a fold takes, (directory, file name, size): all of them, or
    those of the first directories (``SAMPLE_DIR`` last) until ``budget`` objects."""
    found: list[tuple[str, str, int]] = []
    for directory in sorted(directories, key=lambda name: name == SAMPLE_DIR):
        if budget is not None and len(found) >= budget:
            break
        found.extend(
            (directory, name, size)
            for name, size in _sizes(objects / directory)
            if _LOOSE_FILE.fullmatch(name)
        )
    return found


def _loose_dirs(objects: Path) -> list[str]:
    return [name for name in _names(objects) if LOOSE_DIR.fullmatch(name)]


def _foldable_packs(packs: Path) -> list[tuple[Path, int]]:
    """Each pack under ``FOLD_CAP`` and ``FOLD_OBJECTS``: its index and its size."""
    found = []
    for name in _names(packs):
        if not (name.startswith("pack-") and name.endswith(".idx")):
            continue
        index = packs / name
        with contextlib.suppress(FileNotFoundError):
            stat = index.with_suffix(".pack").stat()
            if stat.st_size >= FOLD_CAP:
                continue
            count = pack_object_count(index)
            if count is not None and count < FOLD_OBJECTS:
                found.append((index, stat.st_size))
    return found


def _sizes(directory: Path) -> list[tuple[str, int]]:
    """The files of a loose-object directory and their sizes."""
    found = []
    with contextlib.suppress(FileNotFoundError, NotADirectoryError), os.scandir(directory) as it:
        for entry in it:
            with contextlib.suppress(FileNotFoundError):
                found.append((entry.name, entry.stat(follow_symlinks=False).st_size))
    return found


def _names(directory: Path) -> list[str]:
    try:
        return os.listdir(directory)
    except (FileNotFoundError, NotADirectoryError):
        return []
