"""A lane chain's head tree, directory by directory, edited in memory.

libgit2's TreeBuilder copies every entry of the directory it edits, sorts them, and
then serializes and hashes the tree (SHA-1 with collision detection) through the
object database's write path, which checks every backend for the object first. A
commit adding one note to a topic of 1,000 records paid that for its topic, ~0.7 ms
of a lane commit's ~1.5 ms. A chain makes its commits one on another, so here each
directory it touches is read and parsed once per chain, kept in git's entry order,
and each commit inserts or removes its entries and hashes the result with hashlib:
tens of microseconds. The bytes are git's own and the refusals TreeBuilder's (the
rules of ``trees._serialize``); the tests compare both ways commit by commit.

An edit changes nothing until it is accepted, so a change the chain does not take
(too large, say) leaves the head as it was.
"""

from __future__ import annotations

import hashlib
from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import pygit2

from impyard.knowledge.change import FileState
from impyard.knowledge.store.history import Added
from impyard.knowledge.store.trees import (
    EXEC_MODE_BYTES,
    FILE_MODE_BYTES,
    TREE_MODE_BYTES,
    Node,
    PathConflict,
    entry_name,
    plan_change,
    stored_blob,
)

#: Reads a tree's body by raw id (the chain's held objects first, then the repository).
ReadTree = Callable[[bytes], bytes]
_GITLINK = b"160000"


@dataclass(frozen=True)
class Directory:
    """One version of a directory: its entries as stored (mode, space, name, NUL, raw id),
    in git's order. One bytes object an entry: a pass may hold every topic of an imp.
    ``keys`` are the entries' places in that order (``_key``), side by side, so a lookup
    bisects plain bytes instead of calling a key function at every step."""

    oid: bytes
    entries: list[bytes]
    keys: list[bytes]

    @classmethod
    def parse(cls, oid: bytes, body: bytes) -> Directory:
        entries: list[bytes] = []
        pos, end = 0, len(body)
        while pos < end:
            nul = body.index(b"\0", pos)
            entries.append(body[pos : nul + 21])
            pos = nul + 21
        return cls(oid, entries, [_key(entry) for entry in entries])


def _key(entry: bytes) -> bytes:
    """An entry's place in git's order: its name, read with a trailing '/' for a tree."""
    space = entry.index(b" ")
    name = entry[space + 1 : -21]
    return name + b"/" if entry[:space] == TREE_MODE_BYTES else name


def _find(keys: list[bytes], name: bytes) -> int | None:
    """Where the entry called ``name`` is, as a file or as a directory (``keys``: a
    directory's ``Directory.keys``)."""
    for key in (name, name + b"/"):
        at = bisect_left(keys, key)
        if at < len(keys) and keys[at] == key:
            return at
    return None


def _mode_and_id(entry: bytes) -> tuple[bytes, bytes]:
    return entry[: entry.index(b" ")], entry[-20:]


_EMPTY = Directory(b"", [], [])


@dataclass
class Edit:
    """What one change does to the head: nothing happens until ``HeadTree.accept``."""

    #: The new root tree's raw id (the empty tree's when nothing is left).
    root: bytes
    #: New tree objects: (raw id, body), each after the trees it names.
    objects: list[tuple[bytes, bytes]] = field(default_factory=list)
    #: Each directory whose tree changed and is still there: (directory, new raw id, the
    #: raw id it replaced or None when it is new); '' is the top.
    trees: list[tuple[str, bytes, bytes | None]] = field(default_factory=list)
    #: File paths whose entry changed: (path, the blob it now holds or None when deleted).
    files: list[tuple[str, bytes | None]] = field(default_factory=list)
    #: Raw ids of the blobs the written and deleted paths held before (the result's size
    #: is the written sizes minus theirs, as ``sizes.size_delta`` counts it).
    replaced: list[bytes] = field(default_factory=list)
    #: Each entry name that came or went: (directory, name, whether it is there now).
    names: list[tuple[str, str, bool]] = field(default_factory=list)
    _versions: dict[str, Directory | None] = field(default_factory=dict)

    def added(self) -> Added:
        """What the commit of this edit changed and added, as ``history`` keeps it."""
        blobs = [blob for _, blob in self.files if blob is not None]
        return Added(
            paths=tuple(sorted((path for path, _ in self.files), key=_changed_order)),
            objects=frozenset([*blobs, *(tree for _, tree, _ in self.trees)]),
            trees=tuple(sorted(self.trees, key=lambda tree: tree[0])),
        )


def _changed_order(path: str) -> list[tuple[str, bool]]:
    """``gitobj.changed_paths`` order: by name at each level, and what was under a
    directory before the file that replaced it."""
    *directories, name = path.split("/")
    return [*((directory, False) for directory in directories), (name, True)]


class HeadTree:
    """The tree at the head of a chain, parsed where the chain has touched it."""

    def __init__(
        self, root: bytes, read: ReadTree, known: Mapping[str, Directory] | None = None
    ) -> None:
        """``known``: directories parsed before (an earlier chain's ``parsed``), by path;
        one is used only where the head holds the same tree id, so a stale one is never
        read, only parsed again."""
        self.root = root
        self._read = read
        self._directories: dict[str, Directory] = dict(known or {})

    @property
    def parsed(self) -> Mapping[str, Directory]:
        """Every directory parsed so far, by path, at the version last seen there."""
        return self._directories

    def edit(
        self,
        repo: pygit2.Repository,
        written: Mapping[str, FileState],
        deleted: Iterable[str],
    ) -> Edit:
        """The head with ``written`` put and ``deleted`` removed (``trees.build_tree``'s
        result and refusals); every written blob must be in ``repo``."""
        edit = Edit(root=b"")
        root = self._edit(repo, self.root, plan_change(written, deleted), "", edit)
        if root is None:  # nothing left: the empty tree
            root = _hash(b"")
            if root != self.root:
                edit.objects.append((root, b""))
                edit.trees.append(("", root, self.root))
                edit._versions[""] = Directory(root, [], [])
        edit.root = root
        return edit

    def accept(self, edit: Edit) -> None:
        """Make ``edit`` the head."""
        self.root = edit.root
        for directory, version in edit._versions.items():
            if version is None:
                self._directories.pop(directory, None)
            else:
                self._directories[directory] = version

    def directory_id(self, path: str) -> bytes | None:
        """The raw id of directory ``path`` at the head, for one this head's edits changed
        (None for one they removed; for one they did not change, the id it had when last
        parsed, or None)."""
        known = self._directories.get(path)
        return known.oid if known is not None else None

    def _directory(self, path: str, oid: bytes) -> Directory:
        known = self._directories.get(path)
        if known is not None and known.oid == oid:
            return known
        return Directory.parse(oid, self._read(oid))

    def _edit(
        self, repo: pygit2.Repository, oid: bytes | None, node: Node, path: str, edit: Edit
    ) -> bytes | None:
        prefix = f"{path}/" if path else ""
        old = self._directory(path, oid) if oid is not None else _EMPTY
        entries, keys = list(old.entries), list(old.keys)

        def get(name: bytes) -> tuple[bytes, bytes] | None:
            at = _find(keys, name)
            return _mode_and_id(entries[at]) if at is not None else None

        def remove(name: bytes) -> None:
            at = _find(keys, name)
            if at is not None:
                del entries[at], keys[at]

        def put(name: bytes, mode: bytes, raw: bytes) -> None:
            remove(name)
            key = name + b"/" if mode == TREE_MODE_BYTES else name
            at = bisect_left(keys, key)
            entries.insert(at, b"%s %s\0%s" % (mode, name, raw))
            keys.insert(at, key)

        touched: dict[bytes, str] = {}  # entry name -> its path
        files_touched: set[str] = set()  # the paths of files written or deleted
        for name in node.deleted:
            key = name.encode("utf-8", "surrogateescape")
            entry = get(key)
            if entry is not None and entry[0] != TREE_MODE_BYTES:
                remove(key)
                touched[key] = prefix + name
                files_touched.add(prefix + name)
        for name, child in node.dirs.items():
            key = entry_name(prefix, name)
            entry = get(key)
            if entry is not None and entry[0] != TREE_MODE_BYTES:
                raise PathConflict(prefix + name)
            new = self._edit(repo, entry[1] if entry else None, child, prefix + name, edit)
            if new is None:
                if entry is not None:
                    remove(key)
            elif entry is None or entry[1] != new:
                put(key, TREE_MODE_BYTES, new)
            touched.setdefault(key, prefix + name)
        for name, state in node.files.items():
            key = entry_name(prefix, name)
            entry = get(key)
            if entry is not None and entry[0] == TREE_MODE_BYTES:
                raise PathConflict(prefix + name)
            mode = EXEC_MODE_BYTES if state.executable else FILE_MODE_BYTES
            put(key, mode, stored_blob(repo, prefix + name, state.blob))
            touched[key] = prefix + name
            files_touched.add(prefix + name)
        for key, entry_path in touched.items():
            at = _find(old.keys, key)
            was, now = _mode_and_id(old.entries[at]) if at is not None else None, get(key)
            if (was is None) != (now is None):
                edit.names.append((path, entry_path[len(prefix) :], now is not None))
            if entry_path not in files_touched:
                continue
            before, after = _file(was), _file(now)
            if before is not None and before[0] != _GITLINK:
                edit.replaced.append(before[1])
            if before != after:
                edit.files.append((entry_path, after[1] if after is not None else None))

        if not entries:
            if oid is not None:
                edit._versions[path] = None
            return None
        if oid is not None and entries == old.entries:
            return oid
        body = b"".join(entries)
        new_oid = _hash(body)
        edit.objects.append((new_oid, body))
        edit.trees.append((path, new_oid, oid))
        edit._versions[path] = Directory(new_oid, entries, keys)
        return new_oid


def _file(entry: tuple[bytes, bytes] | None) -> tuple[bytes, bytes] | None:
    """``entry`` when it is not a directory."""
    return entry if entry is not None and entry[0] != TREE_MODE_BYTES else None


def _hash(body: bytes) -> bytes:
    digest = hashlib.sha1(b"tree %d\0" % len(body))
    digest.update(body)
    return digest.digest()
