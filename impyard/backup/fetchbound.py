"""What a restore's fetch may inflate: no object past a bound, by the sizes declared.

libgit2 inflates whole every object it packs (the local transport builds a pack of the
backup's objects) and every delta it resolves (the indexer, once a remote's pack is in),
so a backup of 1 MB whose one blob inflates to 1 GiB took 1.1 GB and 15 s before any
gate could read a size. Sizes are read first, where they are declared:

- a local backup (a path or ``file://``): every object's header (a delta's is the size of
  the object it makes), and the file of every loose object, which libgit2 reads whole;
  one that borrows objects from another repository (``objects/info/alternates``) is
  refused, as Impyard never makes one;
- a pack a remote sends: each entry as the indexer writes it to disk, its header and a
  delta's own header (the first bytes of its stream), so a blob over the bound is
  refused when its first bytes arrive and a delta over it before it is resolved.

A backup that stays within the bound may still change between the check and the fetch;
the gate reads the fetched repository by headers again.
"""

from __future__ import annotations

import mmap
import os
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import pygit2

from impyard.backup.transport import Callbacks
from impyard.common.errors import BackupError
from impyard.knowledge.gates.treegate import Problems, TreeProblem

RULE = "object-too-large"
#: libgit2's indexer writes a pack it receives to ``objects/pack/pack_git2_XXXXXX``.
RECEIVING = "pack_git2_*"
#: The indexer writes through mmap and grows the file a page ahead of what it wrote, so
#: only the file less its last page is surely the pack.
_PAGE = max(mmap.PAGESIZE, mmap.ALLOCATIONGRANULARITY)
_CHUNK = 1 << 20
_KINDS = {1: "commit", 2: "tree", 3: "blob", 4: "tag", 6: "delta", 7: "delta"}
_OFS_DELTA, _REF_DELTA = 6, 7
_LOOSE_DIR = re.compile(r"[0-9a-f]{2}")
_KIND_NAMES = {
    pygit2.enums.ObjectType.COMMIT: "commit",
    pygit2.enums.ObjectType.TREE: "tree",
    pygit2.enums.ObjectType.BLOB: "blob",
    pygit2.enums.ObjectType.TAG: "tag",
}


class TooLarge(BackupError):
    """Objects a fetch would inflate past the bound, one problem each; nothing inflated."""

    def __init__(self, problems: Problems) -> None:
        more = len(problems.found) + problems.omitted - 1
        first = problems.found[0].line() if problems.found else "objects too large"
        super().__init__(f"{first} (and {more} more)" if more > 0 else first)
        self.problems = problems


def over(size: int, bound: int) -> str:
    return f"{size} bytes, over {bound}, the largest object a restore takes"


def check_local(git_dir: Path, bound: int) -> None:
    """Raise ``TooLarge`` for every object of the local repository ``git_dir`` that is
    over ``bound`` by its header, and every loose object file over it on disk."""
    objects = git_dir / "objects"
    if os.path.lexists(objects / "info" / "alternates"):
        raise BackupError(
            f"the backup at {git_dir} borrows objects from another repository "
            "(objects/info/alternates), which Impyard never makes"
        )
    problems = Problems()
    _loose_files(objects, bound, problems)
    if problems:  # before libgit2 opens any of them
        raise TooLarge(problems)
    try:
        odb = pygit2.Odb(str(objects))
        for oid in odb:
            kind, size = odb.read_header(oid)
            if size > bound:
                where = f"object {str(oid)[:12]}"
                name = _KIND_NAMES.get(kind, "object")
                problems.add(TreeProblem(where, "", RULE, f"a {name} of {over(size, bound)}"))
    except (KeyError, ValueError, pygit2.GitError) as exc:
        raise BackupError(f"cannot read the objects of the backup at {git_dir}: {exc}") from exc
    if problems:
        raise TooLarge(problems)


def _loose_files(objects: Path, bound: int, problems: Problems) -> None:
    # Deflate never grows data by more than ~0.03% and a few bytes: a bigger file holds
    # more than its header declares, and libgit2 reads the whole file into memory.
    most = bound + bound // 100 + 1024
    for directory in sorted(objects.iterdir()) if objects.is_dir() else ():
        loose = bool(_LOOSE_DIR.fullmatch(directory.name))
        if not (loose or directory.name == "pack") or not directory.is_dir():
            continue
        for entry in sorted(os.scandir(directory), key=lambda e: e.name):
            where = f"object {directory.name}{entry.name[:10]}" if loose else f"pack/{entry.name}"
            try:
                # What libgit2 opens (a link's target too), looked at without opening it.
                size = entry.stat().st_size
                regular = entry.is_file()
            except OSError:
                continue  # gone, or a dangling link: libgit2 cannot open it either
            if not regular:
                # libgit2 would open it and wait on a fifo, or read a device for ever.
                problems.add(TreeProblem(where, "", RULE, "not a regular file"))
            elif loose and size > most:
                message = f"a loose object file of {over(size, most)}"
                problems.add(TreeProblem(where, "", RULE, message))


@dataclass
class _Entry:
    """One pack entry being read: its stream inflated only to count what it makes."""

    number: int
    kind: int
    declared: int
    inflater: zlib._Decompress = field(default_factory=zlib.decompressobj)
    made: int = 0
    head: bytes = b""  # a delta's first bytes: the sizes of its base and its result


class PackWatch:
    """Follows the pack libgit2 receives into ``pack_dir`` and refuses it (``TooLarge``)
    at the first entry that declares more than ``bound`` bytes, or inflates past what it
    declares."""

    def __init__(self, pack_dir: Path, bound: int) -> None:
        self.pack_dir = pack_dir
        self.bound = bound
        self._fd: int | None = None
        self._pos = 0  # the next byte to read
        self._count: int | None = None  # entries the pack declares
        self._done = 0  # entries read to their end
        self._entry: _Entry | None = None
        self._sure = 0  # the file is surely the pack up to here
        self._buffer = b""
        self._at = 0  # the file offset of the buffer's first byte
        self._kept = 0  # the buffer may be read again up to here

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def follow(self, received: int) -> None:
        """Read every entry the indexer has taken (``received``: it wrote them whole, and
        resolves a delta only once all are in) and what more is surely written."""
        fd = self._open()
        if fd is None:
            if received:
                raise BackupError(f"cannot find the pack libgit2 receives in {self.pack_dir}")
            return
        size = os.fstat(fd).st_size
        self._sure = max(self._sure, size - _PAGE)
        while self._count is None or self._done < self._count:
            must = self._done < received
            if not self._step(fd, size if must else self._sure):
                if must:
                    raise BackupError(f"the pack received ends inside entry {self._done + 1}")
                return

    def _open(self) -> int | None:
        if self._fd is None:
            found = sorted(self.pack_dir.glob(RECEIVING))
            if len(found) > 1:
                raise BackupError(f"more than one pack is being received in {self.pack_dir}")
            if found:
                self._fd = os.open(found[0], os.O_RDONLY | os.O_NOFOLLOW)
        return self._fd

    def _step(self, fd: int, end: int) -> bool:
        """Read on towards ``end``; False when there is nothing more to read there."""
        data = self._read(fd, end)
        if not data:
            return False
        if self._count is None:
            return self._pack_header(data[:12])
        if self._entry is None:
            return self._entry_header(data[:32])
        self._pos += self._inflate(self._entry, data)
        return True

    def _read(self, fd: int, end: int) -> memoryview:
        """The file from the next byte up to ``end`` (at most ``_CHUNK`` of it). Only what
        was surely written when read is kept for later reads: the rest may be zeros yet."""
        want = min(end, self._pos + _CHUNK)
        if want <= self._pos:
            return memoryview(b"")
        stop = min(self._kept, want)
        # Read again when the buffer lacks the next byte, or nearly runs out before ``end``
        # (an entry's header may not be cut).
        if self._pos < self._at or stop - self._pos < min(64, want - self._pos):
            self._buffer = os.pread(fd, want - self._pos, self._pos)
            self._at, stop = self._pos, want
            self._kept = min(want, self._sure)
        return memoryview(self._buffer)[self._pos - self._at : stop - self._at]

    def _pack_header(self, data: memoryview) -> bool:
        if len(data) < 12:
            return False
        if bytes(data[:4]) != b"PACK" or int.from_bytes(data[4:8], "big") not in (2, 3):
            raise BackupError("the remote sent something that is not a pack")
        self._count = int.from_bytes(data[8:12], "big")
        self._pos = 12
        return True

    def _entry_header(self, data: memoryview) -> bool:
        parsed = _parse_entry_header(data)
        if parsed is None:
            if len(data) >= 32:
                raise BackupError(f"pack entry {self._done + 1} has no readable header")
            return False
        kind, size, length = parsed
        number = self._done + 1
        if kind not in _KINDS:
            raise BackupError(f"pack entry {number} is of no object type ({kind})")
        if size > self.bound:
            self._refuse(number, f"a {_KINDS[kind]} entry of {over(size, self.bound)}")
        self._entry = _Entry(number, kind, size)
        self._pos += length
        return True

    def _inflate(self, entry: _Entry, chunk: memoryview) -> int:
        """Feed ``chunk`` to the entry's stream; how much of it the stream took."""
        data: memoryview | bytes = chunk
        try:
            while data and not entry.inflater.eof:
                made = entry.inflater.decompress(data, _CHUNK)
                entry.made += len(made)
                if entry.kind in (_OFS_DELTA, _REF_DELTA) and len(entry.head) < 20:
                    entry.head += made[: 20 - len(entry.head)]
                    self._delta_sizes(entry)
                if entry.made > entry.declared:
                    self._refuse(entry.number, f"inflates past the {entry.declared} it declares")
                data = entry.inflater.unconsumed_tail
        except zlib.error as exc:
            raise BackupError(f"pack entry {entry.number} is not a zlib stream: {exc}") from exc
        if not entry.inflater.eof:
            return len(chunk)
        self._entry = None
        self._done += 1
        return len(chunk) - len(entry.inflater.unused_data)

    def _delta_sizes(self, entry: _Entry) -> None:
        base = _varint(entry.head, 0)
        result = _varint(entry.head, base[1]) if base is not None else None
        if base is None or result is None:
            return
        size = max(base[0], result[0])
        if size > self.bound:
            self._refuse(entry.number, f"a delta making an object of {over(size, self.bound)}")

    def _refuse(self, number: int, message: str) -> None:
        where = f"pack entry {number} of {self._count}"
        problems = Problems()
        problems.add(TreeProblem(where, "", RULE, message))
        raise TooLarge(problems)


def _parse_entry_header(data: memoryview) -> tuple[int, int, int] | None:
    """(type, declared size, header length with a delta's base) of the entry ``data``
    starts with; None when ``data`` ends first."""
    if not data:
        return None
    kind = (data[0] >> 4) & 7
    size = data[0] & 0x0F
    shift, at = 4, 1
    more = data[0] & 0x80
    while more:
        if at >= len(data) or shift > 63:
            return None
        size |= (data[at] & 0x7F) << shift
        more = data[at] & 0x80
        shift += 7
        at += 1
    if kind == _REF_DELTA:
        at += 20
    elif kind == _OFS_DELTA:
        while True:
            if at >= len(data):
                return None
            at += 1
            if not data[at - 1] & 0x80:
                break
    return (kind, size, at) if at <= len(data) else None


def _varint(data: bytes, at: int) -> tuple[int, int] | None:
    """A delta header's little-endian size at ``at`` and where it ends; None if cut."""
    value = shift = 0
    while at < len(data):
        byte = data[at]
        value |= (byte & 0x7F) << shift
        shift += 7
        at += 1
        if not byte & 0x80:
            return value, at
    return None


class FetchCallbacks(Callbacks):
    """The backup transport's callbacks, with a ``PackWatch`` on the pack received."""

    def __init__(self, watch: PackWatch) -> None:
        super().__init__()
        self.watch = watch

    def transfer_progress(self, stats: pygit2.remotes.TransferProgress) -> None:
        self.watch.follow(stats.received_objects)
