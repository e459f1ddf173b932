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
from typing import TYPE_CHECKING, NamedTuple

from impyard.contract import parse_user
from impyard.errors import KnowledgeError

if TYPE_CHECKING:
    import pygit2

# pygit2 is imported by the functions that read objects: owners, errors and directory
# helpers serve a run's checkout before its box starts, when pygit2 is not loaded yet.

Owner = tuple[int, int]

# pygit2 file modes, as plain ints (pygit2 returns an IntFlag).
_BLOB = 0o100644
_BLOB_EXEC = 0o100755
_TREE = 0o040000

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC

OPAQUE_XATTR = "trusted.overlay.opaque"


class CheckoutError(KnowledgeError):
    """A run checkout or one of its layers could not be prepared or released."""


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


def _check_entry(entry: pygit2.Object, where: str) -> None:
    # The canonical repository only ever receives validated changes; a symlink or
    # submodule here means it was written by something else, and must not reach a box.
    if not (is_tree(entry) or is_blob(entry)):
        raise CheckoutError(
            f"canonical tree holds an unsupported entry {where!r} "
            f"(mode {int(entry.filemode):o}); refusing to materialize it"
        )


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
    """
    import pygit2

    from impyard.knowledge.gitobj import lookup_entry

    src_fd, src_tree = link_from if link_from is not None else (-1, None)
    for name, entry in entries(tree):
        where = prefix + name
        _check_entry(entry, where)
        src = lookup_entry(src_tree, name)
        if is_tree(entry):
            child_fd = mkdir_owned(dir_fd, name, owner)
            try:
                sub_link: tuple[int, pygit2.Tree] | None = None
                if isinstance(src, pygit2.Tree):
                    sub_link = (open_dir(name, src_fd), src)
                try:
                    write_tree(
                        repo,
                        as_tree(entry),
                        child_fd,
                        owner,
                        link_from=sub_link,
                        identities=identities,
                        prefix=where + "/",
                    )
                finally:
                    if sub_link is not None:
                        os.close(sub_link[0])
            finally:
                os.close(child_fd)
        elif (
            src is not None and is_blob(src) and src.id == entry.id and _link(src_fd, dir_fd, name)
        ):
            pass
        else:
            st = write_blob(repo, entry.id, dir_fd, name, owner)
            if identities is not None:
                identities[where] = Identity.of(st)


def _link(src_fd: int, dst_fd: int, name: str) -> bool:
    try:
        os.link(name, name, src_dir_fd=src_fd, dst_dir_fd=dst_fd, follow_symlinks=False)
    except OSError as exc:
        if exc.errno == errno.EMLINK:  # the inode's link count is full: write the bytes
            return False
        raise
    return True


def write_delta(
    repo: pygit2.Repository,
    old: pygit2.Tree,
    new: pygit2.Tree,
    dir_fd: int,
    owner: Owner,
    prefix: str = "",
) -> None:
    """Write into ``dir_fd`` an overlay layer that turns ``old`` (below it) into ``new``.

    Equal subtrees are skipped by id, so the cost follows the change, not the tree.
    """
    import pygit2

    old_entries = dict(entries(old))
    new_names = set()
    for name, entry in entries(new):
        new_names.add(name)
        where = prefix + name
        _check_entry(entry, where)
        before = old_entries.get(name)
        if (
            before is not None
            and before.id == entry.id
            and int(before.filemode) == int(entry.filemode)
        ):
            continue
        if is_tree(entry):
            if isinstance(before, pygit2.Tree):
                child_fd = mkdir_owned(dir_fd, name, owner)
                try:
                    write_delta(repo, before, as_tree(entry), child_fd, owner, where + "/")
                finally:
                    os.close(child_fd)
            else:
                # Replaces a lower file (or nothing): opaque, so nothing below shows through.
                child_fd = mkdir_owned(dir_fd, name, owner, opaque=before is not None)
                try:
                    write_tree(repo, as_tree(entry), child_fd, owner, prefix=where + "/")
                finally:
                    os.close(child_fd)
        else:
            # A file in a higher layer hides a lower file or a whole lower directory.
            write_blob(repo, entry.id, dir_fd, name, owner)
    for name in old_entries.keys() - new_names:
        write_whiteout(dir_fd, name)


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
