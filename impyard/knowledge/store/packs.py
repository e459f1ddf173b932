"""Writing many git objects at once, durably: one pack and its index instead of a file each.

With fsync on (repo.py), libgit2 writes every loose object as its own file,
fsyncs it and fsyncs its directory: about a millisecond per object on a normal
disk, so a run adding 30,000 records spent most of its checkpoint in fsync,
twice (canonical repo and origin). A pack holds any number of objects in two
files (``.pack`` and ``.idx``, written by ``packfile``), so the same change
costs three fsyncs. Small batches (a run's few new blobs) stay loose: a pack for one
or two objects costs more fsyncs than it saves. A lane pass's commits and trees are not
written here: they go as one pack whatever their number (``staging``).
"""

from __future__ import annotations

import hashlib
import struct
from pathlib import Path
from types import TracebackType

import pygit2

from impyard.knowledge.store.packfile import IDX_HEADER, IDX_MAGIC, PackWriter

# From this many objects a batch is written as one pack. Measured with fsync on: a
# loose object costs ~0.5-1 ms, a pack ~1-2 ms whatever its size, so a pack wins
# from a handful of objects on; but every pack also slows each later lookup a
# little (libgit2 searches packs one by one) until packs are consolidated, so the
# common small run's blobs (a few records) stay loose.
PACK_THRESHOLD = 32
# A batch buffers at most this many bytes before it starts streaming into a pack,
# so a run that leaves a few huge files never holds them all in memory.
BUFFER_BYTES = 8 << 20

_TYPE_NAMES = {1: b"commit", 2: b"tree", 3: b"blob", 4: b"tag"}


def object_id(kind: int, data: bytes) -> bytes:
    """The raw SHA-1 git names an object of ``kind`` (a pygit2 ObjectType) with ``data`` by."""
    digest = hashlib.sha1(b"%s %d\0" % (_TYPE_NAMES[kind], len(data)))
    digest.update(data)
    return digest.digest()


def pack_dir(repo: pygit2.Repository) -> Path:
    return Path(repo.path) / "objects" / "pack"


def pack_object_count(idx: Path) -> int | None:
    """How many objects a version 2 ``.idx`` lists (None: not one, or unreadable)."""
    try:
        with idx.open("rb") as handle:
            return _count(handle.read(IDX_HEADER))
    except OSError:
        return None


def _count(header: bytes) -> int | None:
    if len(header) != IDX_HEADER or header[:8] != IDX_MAGIC + struct.pack(">I", 2):
        return None
    count: int = struct.unpack_from(">I", header, IDX_HEADER - 4)[0]
    return count


def pack_object_ids(idx: Path, at_most: int) -> list[bytes] | None:
    """The raw oids a version 2 ``.idx`` lists, or None if it lists more than ``at_most``
    (or is not a version 2 index, or cannot be read)."""
    try:
        with idx.open("rb") as handle:
            count = _count(handle.read(IDX_HEADER))
            if count is None or count > at_most:
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
