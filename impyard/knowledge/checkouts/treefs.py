"""Write Git trees from the canonical repository into plain directories, as the box user.

Shared by the overlay layers and the copy fallback. Everything is done relative
to directory file descriptors (``dir_fd``) so no path is resolved twice, and
every file is created with ``O_EXCL`` and mode 0644: a checkout never carries an
executable bit, whatever the tree says.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from impyard.common.contract import parse_user
from impyard.common.errors import KnowledgeError
from impyard.common.textsafe import visible
from impyard.knowledge.validation.pathnames import MAX_DEPTH, entry_name_rules

if TYPE_CHECKING:
    import pygit2

# pygit2 is imported by the functions that read objects: owners, errors and directory
# helpers serve a run's checkout before its box starts, when pygit2 is not loaded yet.

Owner = tuple[int, int]

# pygit2 file modes, as plain ints (pygit2 returns an IntFlag).
_BLOB = 0o100644
_BLOB_EXEC = 0o100755
_TREE = 0o040000
_SYMLINK = 0o120000

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC

OPAQUE_XATTR = "trusted.overlay.opaque"

#: Files a checkout writes at most (paths, however many trees they share): ten times an
#: imp of 100,000 records. A tree of shared subtrees can name far more paths than it has
#: objects; past this a checkout would write without end.
MAX_FILES = 1_000_000


class CheckoutError(KnowledgeError):
    """A run checkout or one of its layers could not be prepared or released."""


class UnsafeTreeError(CheckoutError):
    """A tree holds entries no checkout may write (``..``, a name with ``/``, Git metadata,
    a symlink, a nest too deep, ...); nothing of it was written."""

    def __init__(self, problems: list[tuple[str, str, str]]) -> None:
        listed = "; ".join(f"{path}: {rule}: {message}" for path, rule, message in problems[:5])
        more = f"; and {len(problems) - 5} more" if len(problems) > 5 else ""
        super().__init__(
            f"refusing to write a checkout holding {len(problems)} unsafe "
            f"entr{'y' if len(problems) == 1 else 'ies'} (nothing written): {listed}{more}"
        )
        self.problems = problems


class Identity(NamedTuple):
    """What lstat says about a file the host wrote; a box can forge mtime but not ctime.

    A tuple, so the snapshot compares it against a fresh lstat without allocating.
    """

    ino: int
    size: int
    mtime_ns: int
    ctime_ns: int

    @classmethod
    def of(cls, st: os.stat_result) -> Identity:
        return cls(st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def parse_owner(value: str | Owner) -> Owner:
    """``"65532:65532"`` (policy ``box.user``) or ``(uid, gid)`` → ``(uid, gid)``."""
    if isinstance(value, tuple):
        uid, gid = value
    else:
        try:
            uid, gid = parse_user(value)
        except ValueError as exc:
            raise CheckoutError(str(exc)) from exc
    if uid < 0 or gid < 0:
        raise CheckoutError(f"box user {value!r} must be numeric 'uid:gid'")
    return uid, gid


def format_owner(owner: Owner) -> str:
    return f"{owner[0]}:{owner[1]}"


def is_tree(entry: pygit2.Object) -> bool:
    return int(entry.filemode) == _TREE


def is_blob(entry: pygit2.Object) -> bool:
    return int(entry.filemode) in (_BLOB, _BLOB_EXEC)


def is_executable(entry: pygit2.Object) -> bool:
    return int(entry.filemode) == _BLOB_EXEC


def mkdir_owned(dir_fd: int, name: str, owner: Owner, *, opaque: bool = False) -> int:
    """Create directory ``name`` under ``dir_fd`` owned by ``owner``; return an fd on it."""
    os.mkdir(name, 0o755, dir_fd=dir_fd)
    fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    try:
        os.fchown(fd, *owner)
        os.fchmod(fd, 0o755)
        if opaque:
            os.setxattr(fd, OPAQUE_XATTR, b"y")
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_dir(path: str | os.PathLike[str], dir_fd: int | None = None) -> int:
    return os.open(path, _DIR_FLAGS, dir_fd=dir_fd)


def write_blob(
    repo: pygit2.Repository, oid: pygit2.Oid, dir_fd: int, name: str, owner: Owner
) -> os.stat_result:
    """Write blob ``oid`` as file ``name`` (0644, owned by ``owner``); return its final fstat."""
    import pygit2

    blob = repo[oid]
    if not isinstance(blob, pygit2.Blob):
        raise CheckoutError(f"object {oid} is not a blob")
    data = blob.data
    fd = os.open(name, _NEW_FILE_FLAGS, 0o644, dir_fd=dir_fd)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fchown(fd, *owner)
        # fchown clears no bits on 0644, but umask may have narrowed the create mode.
        os.fchmod(fd, 0o644)
        return os.fstat(fd)
    finally:
        os.close(fd)


def write_whiteout(dir_fd: int, name: str) -> None:
    """An overlay whiteout: a character device 0:0 hides ``name`` in every lower layer."""
    os.mknod(name, stat.S_IFCHR | 0o000, os.makedev(0, 0), dir_fd=dir_fd)


def write_tree(
    repo: pygit2.Repository,
    tree: pygit2.Tree,
    dir_fd: int,
    owner: Owner,
    *,
    link_from: tuple[int, pygit2.Tree] | None = None,
    identities: dict[str, Identity] | None = None,
    prefix: str = "",
) -> None:
    """Write every entry of ``tree`` into the (empty) directory ``dir_fd``.

    ``link_from=(src_fd, src_tree)`` names an immutable layer holding ``src_tree``:
    files whose blob is the same at the same path are hard-linked from it instead of
    written (a compaction costs one link() per unchanged file, no bytes).
    ``identities`` collects each written file's lstat identity (copy fallback).
    Every entry is checked before anything is written (``UnsafeTreeError``).
    """
    plan = TreePlan()
    plan.tree(tree, prefix, 0, link_from[1] if link_from is not None else None)
    plan.run(repo, dir_fd, owner, link_from[0] if link_from is not None else -1, identities)


def write_delta(
    repo: pygit2.Repository,
    old: pygit2.Tree,
    new: pygit2.Tree,
    dir_fd: int,
    owner: Owner,
    prefix: str = "",
) -> None:
    """Write into ``dir_fd`` an overlay layer that turns ``old`` (below it) into ``new``.

    Equal subtrees are skipped by id, so the cost follows the change, not the tree. Every
    entry the layer writes is checked before anything is written (``UnsafeTreeError``).
    """
    plan = TreePlan()
    plan.delta(old, new, prefix, 0)
    plan.run(repo, dir_fd, owner, -1, None)


# What a plan does, in order: enter a new directory (and leave it), write a file, hide a
# lower one. Tuples, not objects: a full layer of 100,000 records is that many steps.
_ENTER, _LEAVE, _FILE, _WHITEOUT = range(4)


@dataclass
class _Frame:
    """A directory being planned: its entries still to go, and what it is written over."""

    entries: Iterator[tuple[str, pygit2.Object]]
    prefix: str
    depth: int
    #: The same directory in the layer files are linked from (full trees only).
    src: pygit2.Tree | None = None
    #: The directory below, by name (deltas only), and the names the new one keeps.
    old: dict[str, pygit2.Object] | None = None
    kept: set[str] = field(default_factory=set)


class TreePlan:
    """Everything a write will do, decided and checked before the first byte is written:
    a tree naming ``..``, holding a symlink or nesting too deep is refused whole, never
    half written. Trees are walked with an explicit stack (no recursion, any depth
    refused at ``MAX_DEPTH``)."""

    def __init__(self) -> None:
        self.steps: list[tuple[Any, ...]] = []
        self.problems: list[tuple[str, str, str]] = []
        self.files = 0
        #: Executable files (written 0644, as every file is).
        self.executables = 0
        #: The entries of the largest directory walked so far.
        self.widest = 0

    def tree(self, tree: pygit2.Tree, prefix: str, depth: int, src: pygit2.Tree | None) -> None:
        self._walk(_Frame(entries(tree), prefix, depth, src=src))

    def delta(self, old: pygit2.Tree, new: pygit2.Tree, prefix: str, depth: int) -> None:
        self._walk(_Frame(entries(new), prefix, depth, old=dict(entries(old))))

    def _walk(self, first: _Frame) -> None:
        self.steps.extend(self._planned(first))

    def _planned(self, first: _Frame) -> Iterator[tuple[Any, ...]]:
        import pygit2

        from impyard.knowledge.store.gitobj import lookup_entry

        stack = [first]
        while stack:
            frame = stack[-1]
            item = next(frame.entries, None)
            if item is None:
                stack.pop()
                if frame.old is not None:
                    for name in sorted(frame.old.keys() - frame.kept):
                        yield (_WHITEOUT, name)
                if stack:
                    yield (_LEAVE,)
                continue
            name, entry = item
            where = frame.prefix + name
            # Read once: each read of ``filemode`` builds an enum (a fifth of a 100,000-file plan).
            mode = int(entry.filemode)
            before: pygit2.Object | None = None
            if frame.old is not None:
                frame.kept.add(name)
                before = frame.old.get(name)
                if before is not None and before.id == entry.id and int(before.filemode) == mode:
                    continue  # the layer below has it
            if not self._safe(entry, mode, where, frame.depth):
                continue
            if mode == _TREE:
                child = as_tree(entry)
                self.widest = max(self.widest, len(child))
                if frame.old is not None and isinstance(before, pygit2.Tree):
                    yield (_ENTER, name, False, False)
                    below = dict(entries(before))
                    stack.append(_Frame(entries(child), where + "/", frame.depth + 1, old=below))
                    continue
                # In a delta, a new directory over a lower file hides it whole (opaque).
                src = lookup_entry(frame.src, name)
                linked = src if isinstance(src, pygit2.Tree) else None
                yield (_ENTER, name, before is not None, linked is not None)
                stack.append(_Frame(entries(child), where + "/", frame.depth + 1, src=linked))
                continue
            self.files += 1
            if self.files > MAX_FILES:
                raise CheckoutError(f"refusing to write more than {MAX_FILES} files")
            if mode == _BLOB_EXEC:
                self.executables += 1
            link = False
            if frame.src is not None:
                src = lookup_entry(frame.src, name)
                link = src is not None and is_blob(src) and src.id == entry.id
            yield (_FILE, name, entry.id, where, link)

    def _safe(self, entry: pygit2.Object, mode: int, where: str, depth: int) -> bool:
        tree = mode == _TREE
        named = entry_name_rules(entry.raw_name or b"", directory=tree)
        if not named and (mode in (_BLOB, _BLOB_EXEC) or (tree and depth + 1 < MAX_DEPTH)):
            return True  # the common case, decided without building the list below
        found = list(named.items())
        if mode == _SYMLINK:
            found.append(("symlink", "a symbolic link (mode 120000)"))
        elif not (tree or mode in (_BLOB, _BLOB_EXEC)):
            found.append(("special-file", f"mode {mode:o} is neither a file nor a directory"))
        elif tree and depth + 1 >= MAX_DEPTH:
            found.append(("too-deep", f"more than {MAX_DEPTH} directory levels"))
        self.problems.extend((visible(where), rule, message) for rule, message in found)
        return not found

    def check(self) -> None:
        """``UnsafeTreeError`` listing every unsafe entry, if the tree has any."""
        if self.problems:
            raise UnsafeTreeError(self.problems)

    def streamed(self, tree: pygit2.Tree) -> Iterator[tuple[str, pygit2.Oid | None]]:
        """``tree`` planned as it is read, ``files`` counting: every directory (``"a/b/"``,
        id None) and file (``"a/b/c"``, its blob id), each directory before what it holds.
        Checked as it goes, refused (``UnsafeTreeError``, every reason) after the last, so
        whoever writes it must discard what it wrote."""
        parents: list[str] = [""]
        self.widest = max(self.widest, len(tree))
        for step in self._planned(_Frame(entries(tree), "", 0)):
            kind = step[0]
            if kind == _FILE:
                yield parents[-1] + step[1], step[2]
            elif kind == _ENTER:
                parents.append(f"{parents[-1]}{step[1]}/")
                yield parents[-1], None
            elif kind == _LEAVE:
                parents.pop()
        self.check()

    def run(
        self,
        repo: pygit2.Repository,
        root: int,
        owner: Owner,
        src_root: int,
        identities: dict[str, Identity] | None,
    ) -> None:
        if self.problems:
            raise UnsafeTreeError(self.problems)
        fds, srcs = [root], [src_root]
        try:
            for step in self.steps:
                kind = step[0]
                if kind == _FILE:
                    _, name, oid, where, link = step
                    if link and _link(srcs[-1], fds[-1], name):
                        continue
                    st = write_blob(repo, oid, fds[-1], name, owner)
                    if identities is not None:
                        identities[where] = Identity.of(st)
                elif kind == _ENTER:
                    _, name, opaque, linked = step
                    fds.append(mkdir_owned(fds[-1], name, owner, opaque=opaque))
                    srcs.append(open_dir(name, srcs[-1]) if linked and srcs[-1] >= 0 else -1)
                elif kind == _LEAVE:
                    os.close(fds.pop())
                    src = srcs.pop()
                    if src >= 0:
                        os.close(src)
                else:
                    write_whiteout(fds[-1], step[1])
        finally:
            for fd in fds[1:] + [fd for fd in srcs[1:] if fd >= 0]:
                os.close(fd)


def _link(src_fd: int, dst_fd: int, name: str) -> bool:
    try:
        os.link(name, name, src_dir_fd=src_fd, dst_dir_fd=dst_fd, follow_symlinks=False)
    except OSError as exc:
        if exc.errno == errno.EMLINK:  # the inode's link count is full: write the bytes
            return False
        raise
    return True


def entries(tree: pygit2.Tree) -> Iterator[tuple[str, pygit2.Object]]:
    for entry in tree:
        name = entry.name
        if name is None:  # pragma: no cover - tree entries always have names
            raise CheckoutError(f"tree {tree.id} has an entry without a name")
        yield name, entry


def as_tree(entry: pygit2.Object) -> pygit2.Tree:
    import pygit2

    if not isinstance(entry, pygit2.Tree):
        raise CheckoutError(f"object {entry.id} is not a tree")
    return entry
