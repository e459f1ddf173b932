"""Writing many git objects at once, durably: one pack and its index instead of a file each.

With fsync on (repo.py), libgit2 writes every loose object as its own file,
fsyncs it and fsyncs its directory: about a millisecond per object on a normal
disk, so a run adding 30,000 records spent most of its checkpoint in fsync,
twice (canonical repo and origin). A pack holds any number of objects in two
files (``.pack`` and ``.idx``), so the same change costs three fsyncs. Packs
are written here in plain Python (the format is short and stable; pygit2
exposes neither libgit2's pack writer for new objects nor its indexer) and are
checked by ``git fsck`` in the tests.

A pack becomes visible to readers only when its ``.idx`` appears, and the
``.idx`` is renamed into place only after both files are on disk; so a reader
never sees half a pack, and nothing can name an object of a pack that would
not survive a power cut. Small batches stay loose: a pack per one-record run
would cost more fsyncs than it saves and leave many small packs behind.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import struct
import tempfile
import zlib
from pathlib import Path
from types import TracebackType
from typing import BinaryIO

import pygit2

from impyard.fsutil import fsync_dir

# From this many objects a batch is written as one pack. Measured with fsync on: a
# loose object costs ~0.5-1 ms, a pack ~1-2 ms whatever its size, so a pack wins
# from a handful of objects on; but every pack also slows each later lookup a
# little (libgit2 searches packs one by one) until packs are consolidated, so the
# common small run (a few records: a few blobs, three trees, a commit) stays loose.
PACK_THRESHOLD = 32
# A batch buffers at most this many bytes before it starts streaming into a pack,
# so a run that leaves a few huge files never holds them all in memory.
BUFFER_BYTES = 8 << 20

_TYPE_NAMES = {1: b"commit", 2: b"tree", 3: b"blob", 4: b"tag"}
_OFS_DELTA = 6
# git's own writers copy at most 64 KiB per delta instruction; readers accept more, but
# not every old one.
_MAX_COPY = 0x10000
_MAX_INSERT = 0x7F
_PACK_HEADER = struct.Struct(">4sII")
_IDX_MAGIC = b"\xfftOc"
_IDX_HEADER = 8 + 256 * 4  # magic, version, fan-out table
# Offsets from here on go to the index's 64-bit table; the 32-bit slot then holds
# this flag plus the position in that table.
_LARGE_OFFSET = 0x80000000
_LARGE_FLAG = 0x80000000
_CHUNK = 1 << 20


def object_id(kind: int, data: bytes) -> bytes:
    """The raw SHA-1 git names an object of ``kind`` (a pygit2 ObjectType) with ``data`` by."""
    digest = hashlib.sha1(b"%s %d\0" % (_TYPE_NAMES[kind], len(data)))
    digest.update(data)
    return digest.digest()


def pack_dir(repo: pygit2.Repository) -> Path:
    return Path(repo.path) / "objects" / "pack"


class PackWriter:
    """Streams objects into a temporary pack in ``pack_dir``; ``finish`` makes it durable."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        created = not directory.is_dir()
        directory.mkdir(parents=True, exist_ok=True)
        if created:
            fsync_dir(directory.parent)
        # git's own temporary names: readers (libgit2, git) only look at *.idx.
        fd, name = tempfile.mkstemp(prefix="tmp_pack_", dir=directory)
        self._tmp = Path(name)
        self._file: BinaryIO = os.fdopen(fd, "w+b")
        self._file.write(_PACK_HEADER.pack(b"PACK", 2, 0))
        self._offset = _PACK_HEADER.size
        # raw oid -> (crc32 of the packed entry, offset of the entry)
        self._entries: dict[bytes, tuple[int, int]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, oid: bytes) -> bool:
        return oid in self._entries

    def any_oid(self) -> bytes:
        return next(iter(self._entries))

    def add(self, kind: int, data: bytes, oid: bytes) -> None:
        """Append one object (whole, never as a delta); a repeated ``oid`` is written once."""
        if oid in self._entries:
            return
        entry = _entry_header(kind, len(data)) + zlib.compress(data, 1)
        self._file.write(entry)
        self._entries[oid] = (zlib.crc32(entry), self._offset)
        self._offset += len(entry)

    def add_delta(self, oid: bytes, base: bytes, delta: bytes) -> None:
        """Append one object as ``delta`` (``packs.delta``) against ``base``, an object
        added before it; a repeated ``oid`` is written once."""
        if oid in self._entries:
            return
        entry = (
            _entry_header(_OFS_DELTA, len(delta))
            + _offset_back(self._offset - self._entries[base][1])
            + zlib.compress(delta, 1)
        )
        self._file.write(entry)
        self._entries[oid] = (zlib.crc32(entry), self._offset)
        self._offset += len(entry)

    def finish(self) -> str:
        """Make the pack and its index durable, then visible; return the pack's name."""
        try:
            checksum = self._seal()
            name = f"pack-{checksum.hex()}"
            if (self.directory / f"{name}.idx").exists():
                # The same objects in the same order, already stored (a retried change):
                # leave the files readers may have mapped alone.
                fsync_dir(self.directory)
                return name
            idx_tmp = self._write_index(checksum)
            try:
                os.replace(self._tmp, self.directory / f"{name}.pack")
                os.replace(idx_tmp, self.directory / f"{name}.idx")
            except BaseException:
                with contextlib.suppress(FileNotFoundError):
                    idx_tmp.unlink()
                raise
            fsync_dir(self.directory)
            return name
        finally:
            self.abort()

    def abort(self) -> None:
        """Drop the temporary pack (no-op once ``finish`` has renamed it)."""
        if not self._file.closed:
            self._file.close()
        with contextlib.suppress(FileNotFoundError):
            self._tmp.unlink()

    def _seal(self) -> bytes:
        """Write the object count into the header and the trailing checksum; fsync."""
        handle = self._file
        handle.seek(8)
        handle.write(struct.pack(">I", len(self._entries)))
        handle.flush()
        handle.seek(0)
        digest = hashlib.sha1()
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
        checksum = digest.digest()
        handle.seek(0, os.SEEK_END)
        handle.write(checksum)
        handle.flush()
        os.fchmod(handle.fileno(), 0o444)
        os.fsync(handle.fileno())
        handle.close()
        return checksum

    def _write_index(self, checksum: bytes) -> Path:
        """A version 2 ``.idx`` for the sealed pack, fsynced under a temporary name."""
        oids = sorted(self._entries)
        fanout = [0] * 256
        for oid in oids:
            fanout[oid[0]] += 1
        running = 0
        for byte in range(256):
            running += fanout[byte]
            fanout[byte] = running
        crcs = [self._entries[oid][0] for oid in oids]
        small: list[int] = []
        large: list[int] = []
        for oid in oids:
            offset = self._entries[oid][1]
            if offset < _LARGE_OFFSET:
                small.append(offset)
            else:
                small.append(_LARGE_FLAG | len(large))
                large.append(offset)
        body = b"".join(
            [
                _IDX_MAGIC,
                struct.pack(">I", 2),
                struct.pack(">256I", *fanout),
                b"".join(oids),
                struct.pack(f">{len(crcs)}I", *crcs),
                struct.pack(f">{len(small)}I", *small),
                struct.pack(f">{len(large)}Q", *large),
                checksum,
            ]
        )
        body += hashlib.sha1(body).digest()
        fd, name = tempfile.mkstemp(prefix="tmp_idx_", dir=self.directory)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(body)
                handle.flush()
                os.fchmod(handle.fileno(), 0o444)
                os.fsync(handle.fileno())
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name)
            raise
        return Path(name)


def _entry_header(kind: int, size: int) -> bytes:
    """A pack entry's type and inflated size: 3 type bits and 4 size bits, then 7 bits a byte."""
    out = bytearray()
    byte = (kind << 4) | (size & 0x0F)
    size >>= 4
    while size:
        out.append(byte | 0x80)
        byte = size & 0x7F
        size >>= 7
    out.append(byte)
    return bytes(out)


def _offset_back(distance: int) -> bytes:
    """How far back an OFS_DELTA's base starts: 7 bits a byte, most significant first,
    each continued byte offset by one (git's encoding)."""
    out = [distance & 0x7F]
    distance >>= 7
    while distance:
        distance -= 1
        out.append(0x80 | (distance & 0x7F))
        distance >>= 7
    return bytes(reversed(out))


def delta(base: bytes, target: bytes) -> bytes:
    """A git delta that makes ``target`` from ``base``: their common prefix and suffix
    copied, what lies between inserted.

    That is all a lane commit does to a tree (an entry or a few added, replaced or
    removed in one place), so a 72 KB topic tree a pass rewrites costs its new entry,
    not 72 KB, to compress, write and fsync. Finding both ends compares ever shorter
    slices: O(size), in memcmp."""
    shorter = min(len(base), len(target))
    prefix = _common_prefix(base, target, shorter)
    suffix = _common_suffix(base, target, shorter - prefix)
    out = bytearray(_size(len(base)) + _size(len(target)))
    _copy(out, 0, prefix)
    middle = target[prefix : len(target) - suffix]
    for start in range(0, len(middle), _MAX_INSERT):
        chunk = middle[start : start + _MAX_INSERT]
        out.append(len(chunk))
        out += chunk
    _copy(out, len(base) - suffix, suffix)
    return bytes(out)


def _common_prefix(a: bytes, b: bytes, limit: int) -> int:
    low, high = 0, limit  # a[:low] == b[:low]; the answer lies in [low, high]
    while low < high:
        mid = (low + high + 1) // 2
        if a[low:mid] == b[low:mid]:
            low = mid
        else:
            high = mid - 1
    return low


def _common_suffix(a: bytes, b: bytes, limit: int) -> int:
    end_a, end_b = len(a), len(b)
    low, high = 0, limit
    while low < high:
        mid = (low + high + 1) // 2
        if a[end_a - mid : end_a - low] == b[end_b - mid : end_b - low]:
            low = mid
        else:
            high = mid - 1
    return low


def _size(size: int) -> bytes:
    """A delta header size: 7 bits a byte, least significant first."""
    out = bytearray()
    while True:
        byte, size = size & 0x7F, size >> 7
        if not size:
            out.append(byte)
            return bytes(out)
        out.append(byte | 0x80)


def _copy(out: bytearray, offset: int, size: int) -> None:
    """Copy instructions for ``size`` bytes of the base from ``offset``."""
    while size > 0:
        chunk = min(size, _MAX_COPY)
        command, operands = 0x80, bytearray()
        for i in range(4):
            if byte := (offset >> (8 * i)) & 0xFF:
                command |= 1 << i
                operands.append(byte)
        if chunk != _MAX_COPY:  # no size bytes at all means 0x10000
            for i in range(3):
                if byte := (chunk >> (8 * i)) & 0xFF:
                    command |= 0x10 << i
                    operands.append(byte)
        out.append(command)
        out += operands
        offset += chunk
        size -= chunk


def pack_object_ids(idx: Path, at_most: int) -> list[bytes] | None:
    """The raw oids a version 2 ``.idx`` lists, or None if it lists more than ``at_most``
    (or is not a version 2 index, or cannot be read)."""
    try:
        with idx.open("rb") as handle:
            header = handle.read(_IDX_HEADER)
            if len(header) != _IDX_HEADER or header[:8] != _IDX_MAGIC + struct.pack(">I", 2):
                return None
            count = struct.unpack_from(">I", header, _IDX_HEADER - 4)[0]
            if count > at_most:
                return None
            table = handle.read(20 * count)
    except OSError:
        return None
    if len(table) != 20 * count:
        return None
    return [table[i : i + 20] for i in range(0, len(table), 20)]


class ObjectBatch:
    """New objects written durably together: loose when few, one pack when many.

    Objects added are readable only after ``write`` returns; leaving the ``with``
    block on an exception writes nothing (a partial pack is deleted).
    """

    def __init__(self, repo: pygit2.Repository, threshold: int = PACK_THRESHOLD) -> None:
        self.repo = repo
        self.threshold = threshold
        self._pending: dict[bytes, tuple[int, bytes]] = {}
        self._pending_bytes = 0
        self._pack: PackWriter | None = None

    def __enter__(self) -> ObjectBatch:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.discard()

    def __len__(self) -> int:
        return len(self._pending) + (len(self._pack) if self._pack is not None else 0)

    def __contains__(self, oid: bytes) -> bool:
        return oid in self._pending or (self._pack is not None and oid in self._pack)

    def add(self, kind: int, data: bytes, oid: bytes | None = None) -> bytes:
        """Queue one object; return its raw oid (computed unless the caller already knows it)."""
        if oid is None:
            oid = object_id(kind, data)
        if oid in self:
            return oid
        if self._pack is not None:
            self._pack.add(kind, data, oid)
            return oid
        self._pending[oid] = (kind, data)
        self._pending_bytes += len(data)
        if len(self._pending) >= self.threshold or self._pending_bytes > BUFFER_BYTES:
            self._pack = PackWriter(pack_dir(self.repo))
            for pending_oid, (pending_kind, pending_data) in self._pending.items():
                self._pack.add(pending_kind, pending_data, pending_oid)
            self._pending.clear()
            self._pending_bytes = 0
        return oid

    def write(self) -> str | None:
        """Make every queued object durable and readable; return the pack's name, if one."""
        if self._pack is not None:
            pack, self._pack = self._pack, None
            probe = pack.any_oid()
            name = pack.finish()
            # libgit2 looks for new packs when a lookup misses; make it look now.
            self.repo.odb.exists(pygit2.Oid(raw=probe))
            return name
        odb = self.repo.odb
        for oid, (kind, data) in self._pending.items():
            # libgit2 fsyncs each loose object and its directory (fsync on: repo.py).
            if odb.write(kind, data).raw != oid:  # pragma: no cover - a broken odb
                raise RuntimeError(f"object {oid.hex()} was stored under another id")
        self._pending.clear()
        self._pending_bytes = 0
        return None

    def discard(self) -> None:
        self._pending.clear()
        self._pending_bytes = 0
        if self._pack is not None:
            self._pack.abort()
            self._pack = None


class ExistenceProbe:
    """``oid in odb`` without libgit2's rescan of the pack directory on every miss.

    ``Odb.exists`` reloads the pack list whenever an object is missing, which
    costs ~10 µs with one pack and ~100 µs with a hundred; a snapshot asks once
    per new file. The backends answer from what they had loaded: a pack added
    since is not seen, which at worst writes an object twice (harmless).
    """

    def __init__(self, repo: pygit2.Repository) -> None:
        # The backends are borrowed from the odb: hold it (and the repo) while they are used.
        self._repo = repo
        self._odb = repo.odb
        self._backends = list(self._odb.backends)

    def __contains__(self, oid: pygit2.Oid) -> bool:
        return any(backend.exists(oid) for backend in self._backends)
