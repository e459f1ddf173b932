"""Building tree objects from a change: only the changed paths are rebuilt, and a change
touching many directories writes its trees as one pack."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import cast

import pygit2

from impyard.common.errors import KnowledgeError
from impyard.knowledge.change import FileState
from impyard.knowledge.store.gitcalls import builder_get, builder_remove
from impyard.knowledge.store.packs import PACK_THRESHOLD, ObjectBatch
from impyard.knowledge.store.repo import EXEC_MODE, FILE_MODE, TREE_MODE


class PathConflict(KnowledgeError):
    """A path is needed both as a file and as a directory."""

    def __init__(self, path: str) -> None:
        super().__init__(f"{path}: needed both as a file and as a directory")
        self.path = path


@dataclass
class Node:
    files: dict[str, FileState] = field(default_factory=dict)
    dirs: dict[str, Node] = field(default_factory=dict)
    deleted: set[str] = field(default_factory=set)


def plan_change(written: Mapping[str, FileState], deleted: Iterable[str]) -> Node:
    """The change as a tree of directories: what each one gets written and deleted."""
    root = Node()
    for path, state in written.items():
        *parents, name = path.split("/")
        node = root
        for part in parents:
            node = node.dirs.setdefault(part, Node())
        node.files[name] = state
    for path in deleted:
        *parents, name = path.split("/")
        node = root
        for part in parents:
            node = node.dirs.setdefault(part, Node())
        node.deleted.add(name)
    return root


def build_tree(
    repo: pygit2.Repository,
    tree: pygit2.Tree | None,
    written: Mapping[str, FileState],
    deleted: Iterable[str],
) -> pygit2.Oid:
    """``tree`` with ``written`` put and ``deleted`` removed, rebuilding only the touched trees.

    Cost is proportional to the change (and to the width of the directories it
    touches), never to the repository. Directories left empty are dropped. The
    new trees are durable on return: a few are written by libgit2 one fsynced
    file each; many (a change spread over many directories) go into one pack.
    """
    plan = plan_change(written, deleted)
    if _count_trees(plan) >= PACK_THRESHOLD:
        return _build_packed(repo, tree, plan)
    oid = _apply(repo, tree, plan, "")
    if oid is None:
        return repo.TreeBuilder().write()
    return oid


def _count_trees(node: Node) -> int:
    return 1 + sum(_count_trees(child) for child in node.dirs.values())


def _apply(
    repo: pygit2.Repository, tree: pygit2.Tree | None, node: Node, prefix: str
) -> pygit2.Oid | None:
    builder = repo.TreeBuilder(tree) if tree is not None else repo.TreeBuilder()
    for name in node.deleted:
        entry = builder_get(builder, name)
        if entry is not None and entry.filemode != TREE_MODE:
            builder_remove(builder, name)
    for name, child in node.dirs.items():
        entry = builder_get(builder, name)
        subtree: pygit2.Tree | None = None
        if entry is not None:
            if entry.filemode != TREE_MODE:
                raise PathConflict(prefix + name)
            subtree = cast(pygit2.Tree, repo[entry.id])
        new = _apply(repo, subtree, child, f"{prefix}{name}/")
        if new is None:
            if entry is not None:
                builder_remove(builder, name)
        else:
            builder.insert(name, new, TREE_MODE)
    for name, state in node.files.items():
        entry = builder_get(builder, name)
        if entry is not None and entry.filemode == TREE_MODE:
            raise PathConflict(prefix + name)
        mode = EXEC_MODE if state.executable else FILE_MODE
        try:
            builder.insert(name, pygit2.Oid(hex=state.blob), mode)
        except (pygit2.GitError, ValueError) as exc:
            raise KnowledgeError(f"{prefix}{name}: cannot be stored in a tree: {exc}") from exc
    if len(builder) == 0:
        return None
    oid: pygit2.Oid = builder.write()
    return oid


# Tree entries as git stores them: mode (ASCII octal), name and raw id.
TREE_MODE_BYTES = b"40000"
FILE_MODE_BYTES = b"100644"
EXEC_MODE_BYTES = b"100755"
_TREE = pygit2.enums.ObjectType.TREE
_BLOB = pygit2.enums.ObjectType.BLOB


def _build_packed(repo: pygit2.Repository, tree: pygit2.Tree | None, plan: Node) -> pygit2.Oid:
    """``build_tree`` for many trees: serialized here and written as one pack.

    libgit2's TreeBuilder can only write each tree straight to the odb (an
    fsynced loose file each); this builds the same bytes in Python instead:
    same entry order, same refusals (bad names, missing blobs, file/directory
    clashes). The tests compare both ways tree for tree.
    """
    with ObjectBatch(repo) as batch:
        raw = _serialize(repo, tree.id.raw if tree is not None else None, plan, "", batch)
        if raw is None:
            raw = batch.add(_TREE, b"")
        batch.write()
    return pygit2.Oid(raw=raw)


def _serialize(
    repo: pygit2.Repository, tree: bytes | None, node: Node, prefix: str, batch: ObjectBatch
) -> bytes | None:
    entries = _read_tree(repo, tree) if tree is not None else {}
    for name in node.deleted:
        key = name.encode("utf-8", "surrogateescape")
        entry = entries.get(key)
        if entry is not None and entry[0] != TREE_MODE_BYTES:
            del entries[key]
    for name, child in node.dirs.items():
        key = entry_name(prefix, name)
        entry = entries.get(key)
        subtree: bytes | None = None
        if entry is not None:
            if entry[0] != TREE_MODE_BYTES:
                raise PathConflict(prefix + name)
            subtree = entry[1]
        new = _serialize(repo, subtree, child, f"{prefix}{name}/", batch)
        if new is None:
            entries.pop(key, None)
        else:
            entries[key] = (TREE_MODE_BYTES, new)
    for name, state in node.files.items():
        key = entry_name(prefix, name)
        entry = entries.get(key)
        if entry is not None and entry[0] == TREE_MODE_BYTES:
            raise PathConflict(prefix + name)
        mode = EXEC_MODE_BYTES if state.executable else FILE_MODE_BYTES
        entries[key] = (mode, stored_blob(repo, prefix + name, state.blob))
    if not entries:
        return None
    ordered = sorted(entries.items(), key=_order)
    body = b"".join(b"%s %s\0%s" % (mode, name, oid) for name, (mode, oid) in ordered)
    return batch.add(_TREE, body)


def _read_tree(repo: pygit2.Repository, oid: bytes) -> dict[bytes, tuple[bytes, bytes]]:
    """A stored tree's entries: name -> (mode, raw id), all as git wrote them."""
    data: bytes = repo.odb.read(pygit2.Oid(raw=oid))[1]
    entries: dict[bytes, tuple[bytes, bytes]] = {}
    pos, end = 0, len(data)
    while pos < end:
        space = data.index(b" ", pos)
        nul = data.index(b"\0", space)
        entries[data[space + 1 : nul]] = (data[pos:space], data[nul + 1 : nul + 21])
        pos = nul + 21
    return entries


def _order(item: tuple[bytes, tuple[bytes, bytes]]) -> bytes:
    """git's tree order: byte order of names, a directory's name read with a trailing '/'."""
    name, (mode, _) = item
    return name + b"/" if mode == TREE_MODE_BYTES else name


def entry_name(prefix: str, name: str) -> bytes:
    """``name`` as a tree entry, refused as libgit2's TreeBuilder refuses it (NTFS rules on)."""
    try:
        raw = name.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise KnowledgeError(f"{prefix}{name}: cannot be stored in a tree: {exc}") from exc
    # NTFS ignores trailing dots and spaces and reads "name:stream" as the file "name".
    folded = name.split(":", 1)[0].rstrip(". ").lower()
    if name in ("", ".", "..") or "/" in name or "\0" in name or folded in (".git", "git~1"):
        raise KnowledgeError(f"{prefix}{name}: cannot be stored in a tree: invalid name")
    return raw


def stored_blob(repo: pygit2.Repository, path: str, blob: str) -> bytes:
    """The raw id of ``blob``, which must already be a blob in the odb (as TreeBuilder insists)."""
    try:
        oid = pygit2.Oid(hex=blob)
        kind = repo.odb.read_header(oid)[0]
    except (KeyError, ValueError, pygit2.GitError) as exc:
        raise KnowledgeError(f"{path}: cannot be stored in a tree: no blob {blob}") from exc
    if kind != _BLOB:
        raise KnowledgeError(f"{path}: cannot be stored in a tree: {blob} is not a blob")
    return oid.raw
