"""Objects a lane pass creates, held in memory until the pass writes them all at once.

With fsync on (repo.py) every object libgit2 writes is its own fsynced file, and
the setting is process-wide, so it cannot be turned off for one pass without
also dropping the durability of every other thread's writes. Instead the pass
works on its own ``Repository`` of the canonical repo whose object database has
one more backend, first in line: an in-memory store that takes every object
written through that repository (trees from ``build_tree``, commits from
``create_commit``) and answers reads of them, while everything already on disk
is read as usual. ``write`` then stores what is held as one durable pack, before
anything names those objects. In that pack a tree the pass rewrote again is a delta
against its previous version (``based_on``): a commit that adds one record to a topic
of 1,000 turns into ~100 bytes instead of another 72 KB tree.

A pass of one commit writes a pack too, not loose objects: its commit and three or four
trees loose took two fsyncs each, in libgit2, which holds the interpreter lock through
them (every other thread of serve waited), and the origin then copied each of them
again, two fsyncs more apiece; the pack is three fsyncs in Python, and the origin links
it whole. One-note tasks through ``serve --concurrency 1`` ran 4-12% faster (4.56
against 5.09 tasks/s, then 4.54 against 4.73: medians of 4, side by side), and 500 runs
of a 100,000-record imp landing one pass each 60-69 a second instead of 38-40. Folds
keep the small packs few (``fold``).

Never ``walk`` a staged repository: pygit2's revision walker releases the GIL
while libgit2 reads commits, and this backend's callbacks need it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pygit2

from impyard.knowledge.store.gitcalls import Repository
from impyard.knowledge.store.gitdelta import delta
from impyard.knowledge.store.packfile import PackWriter
from impyard.knowledge.store.packs import pack_dir

# Ahead of libgit2's own backends (loose 1, packed 2), so writes land here.
_PRIORITY = 1000
# Longest chain of deltas a reader resolves to get a tree back (git's default is 50).
MAX_DELTA_DEPTH = 16


class MemoryObjects(pygit2.OdbBackend):
    """An odb backend holding objects in a dict: the pass's objects until ``write``."""

    def __init__(self) -> None:
        super().__init__()
        self._objects: dict[bytes, tuple[int, bytes]] = {}
        self._order: list[bytes] = []
        #: object -> (the held object it is a new version of, its delta depth)
        self._bases: dict[bytes, tuple[bytes, int]] = {}
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._objects)

    # libgit2's callbacks (pygit2 maps KeyError to "not found").
    def read_cb(self, oid: pygit2.Oid) -> tuple[int, bytes]:
        return self._objects[oid.raw]

    def read_header_cb(self, oid: pygit2.Oid) -> tuple[int, int]:
        kind, data = self._objects[oid.raw]
        return kind, len(data)

    def read_prefix_cb(self, prefix: str) -> tuple[int, bytes, pygit2.Oid]:
        raise KeyError(prefix)  # full ids only: the lane never abbreviates

    def exists_cb(self, oid: pygit2.Oid) -> bool:
        return oid.raw in self._objects

    def exists_prefix_cb(self, prefix: str) -> pygit2.Oid:
        raise KeyError(prefix)

    def write_cb(self, oid: pygit2.Oid, data: bytes, kind: int) -> None:
        self.hold(oid.raw, kind, bytes(data))

    def hold(self, raw: bytes, kind: int, data: bytes) -> None:
        """Take an object made outside libgit2 (``raw`` must be its id)."""
        if raw not in self._objects:
            self._objects[raw] = (kind, data)
            self._order.append(raw)
            self.bytes += len(data)

    def held(self, raw: bytes) -> bytes | None:
        """The data of held object ``raw``, if it is held."""
        found = self._objects.get(raw)
        return found[1] if found is not None else None

    def refresh_cb(self) -> None:
        return None

    def based_on(self, oid: bytes, base: bytes) -> None:
        """``oid`` is a new version of ``base`` (a tree at the same path): both held, the
        pack may store it as a delta against it."""
        if oid in self._objects and base in self._objects and oid not in self._bases:
            depth = self._bases[base][1] + 1 if base in self._bases else 1
            if depth <= MAX_DELTA_DEPTH:
                self._bases[oid] = (base, depth)

    def mark(self) -> int:
        """A point ``rollback`` can return to."""
        return len(self._order)

    def rollback(self, mark: int) -> None:
        """Forget every object written since ``mark`` (a change the pass did not take)."""
        for raw in self._order[mark:]:
            self.bytes -= len(self._objects.pop(raw)[1])
            self._bases.pop(raw, None)
        del self._order[mark:]

    def write(self, repo: pygit2.Repository) -> None:
        """Store every held object in ``repo`` as one durable pack (three fsyncs), new
        versions of trees as deltas, then forget them."""
        if self._order:
            self._write_pack(repo)
        self.rollback(0)

    def _write_pack(self, repo: pygit2.Repository) -> None:
        writer = PackWriter(pack_dir(repo))
        try:
            for raw in self._order:
                kind, data = self._objects[raw]
                based = self._bases.get(raw)
                # Only against an object already in the pack (one a later change
                # re-created could come after it).
                if based is not None and based[0] in writer:
                    change = delta(self._objects[based[0]][1], data)
                    if len(change) < len(data) // 2:
                        writer.add_delta(raw, based[0], change)
                        continue
                writer.add(kind, data, raw)
            writer.finish()
        finally:
            writer.abort()
        # libgit2 looks for new packs when a lookup misses; make it look now.
        repo.odb.exists(pygit2.Oid(raw=self._order[0]))


@contextmanager
def staged(path: str) -> Iterator[tuple[pygit2.Repository, MemoryObjects]]:
    """A repository of the canonical repo at ``path`` whose new objects stay in memory."""
    repo = Repository(path)
    memory = MemoryObjects()
    repo.odb.add_backend(memory, _PRIORITY)
    try:
        yield repo, memory
    finally:
        memory.rollback(0)
        repo.free()
