"""Turn what a run left in its checkout into blobs and a ``Change``.

Runs after the box is gone, or while it runs when the box asks for a check or a
mid-run checkpoint (a file it rewrites meanwhile is read as it is at that moment,
never past the size limit), and treats every byte and name it finds as hostile:
entries are classified by lstat (``fstatat`` on a directory fd) before anything
is opened; directories and files are opened relative to their parent's
fd with ``O_NOFOLLOW`` (never a path resolved through box-controlled names) and
``O_NONBLOCK`` (a fifo can never block us, even if one raced in), then fstat'ed to
confirm the same inode; no file is read past the size limit. Adversarial input
becomes a ``Violation`` in ``Change.problems``; only host faults raise.

What is read follows what changed: the overlay upper dir holds only the run's
change; the copy fallback lstat-walks the tree and hashes only files whose
recorded identity (inode, size, mtime, ctime) differs.

A file over the size limit is refused by validation, not here: a snapshot that stores
(a checkpoint, the exit) reads and keeps it while the files over the limit total at most
``candidate_max_bytes``, so a candidate or quarantine holds what a retry under a raised
limit can land (a refused note that was never read was lost, and its retry "landed"
nothing). Past that bound a file is not read at all (listed as not kept); a check keeps
none of them.

New blobs are written together when the walk ends (``packs.ObjectBatch``): one
fsynced pack for a large change instead of an fsynced file per blob, loose
objects for a small one. Either way they are durable when ``snapshot`` returns.
A check (``store=False``) writes nothing: new contents stay in memory
(``Change.unstored``), up to ``CHECK_MEMORY_BYTES``.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Callable

import pygit2

from impyard.common.errors import KnowledgeError
from impyard.knowledge.change import RULES, Change, FileState, Violation
from impyard.knowledge.change import KnowledgeLimits as Limits
from impyard.knowledge.checkouts.checkout import Checkout, read_identities
from impyard.knowledge.checkouts.treefs import OPAQUE_XATTR, Identity, entries, is_executable
from impyard.knowledge.store.gitobj import commit_at, lookup_entry
from impyard.knowledge.store.packs import ExistenceProbe, ObjectBatch
from impyard.knowledge.validation.pathnames import MAX_DEPTH

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
# C0 controls, DEL and C1 controls: newline, tab, escape sequences, ...
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
_BLOB = pygit2.enums.ObjectType.BLOB


# What a check may hold in memory: new content beyond this is refused, not written.
CHECK_MEMORY_BYTES = 256 * 2**20


class SnapshotError(KnowledgeError):
    """The host could not read a checkout (a fault of the host, not of the box)."""


class CheckTooLarge(KnowledgeError):
    """A check would hold more new content in memory than it may."""


class _InMemory:
    """The ``ObjectBatch`` of a check: contents kept in memory, nothing written."""

    def __init__(self, budget: int) -> None:
        self.objects: dict[str, bytes] = {}
        self.budget = budget

    def __enter__(self) -> _InMemory:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def __contains__(self, oid: bytes) -> bool:
        return oid.hex() in self.objects

    def add(self, kind: int, data: bytes, oid: bytes) -> bytes:
        self.budget -= len(data)
        if self.budget < 0:
            raise CheckTooLarge(
                f"the change holds more than {CHECK_MEMORY_BYTES // 2**20} MiB of new content; "
                "a checkpoint (or the exit) validates it"
            )
        self.objects[oid.hex()] = data
        return oid

    def write(self) -> None:
        return None


def snapshot(
    repo: pygit2.Repository, checkout: Checkout, limits: Limits, *, store: bool = True
) -> Change:
    """Hash the run's change into ``repo``'s odb and describe it against ``checkout.base``;
    with ``store`` False keep new contents in ``Change.unstored`` instead (a check)."""
    base = commit_at(repo, checkout.base, SnapshotError).tree
    batch: ObjectBatch | _InMemory = ObjectBatch(repo) if store else _InMemory(CHECK_MEMORY_BYTES)
    with batch:
        walker = _Walker(repo, limits, batch, keep=limits.candidate_max_bytes if store else 0)
        try:
            root_fd = os.open(checkout.root, _DIR_FLAGS)
        except OSError as exc:
            raise SnapshotError(f"cannot open checkout {checkout.root}: {exc}") from exc
        try:
            if checkout.kind == "overlay":
                walker.walk_upper(root_fd, "", base, hidden=False, depth=0)
            else:
                identities = read_identities(checkout.index_path)
                walker.walk_copy(root_fd, "", base, identities, depth=0)
                for path in identities:
                    if path not in walker.present:
                        walker.change.deleted.add(path)
        finally:
            os.close(root_fd)
        batch.write()
    if isinstance(batch, _InMemory):
        walker.change.unstored = batch.objects
    return walker.change


class _Walker:
    def __init__(
        self, repo: pygit2.Repository, limits: Limits, batch: ObjectBatch | _InMemory, *, keep: int
    ) -> None:
        self.repo = repo
        self.batch = batch
        self.stored = ExistenceProbe(repo)
        self.limit = limits.max_file_bytes
        # Bytes of files over ``limit`` this snapshot may still read and keep.
        self.keep_left = keep
        self.keep_bound = keep
        self.change = Change()
        # Paths holding a regular file after the run (copy mode: a base path not
        # here was deleted).
        self.present: set[str] = set()

    # -- overlay: the upper dir is the change -------------------------------------

    def walk_upper(
        self, dir_fd: int, rel: str, base: pygit2.Tree | None, *, hidden: bool, depth: int
    ) -> None:
        """Walk one upper dir. ``hidden``: the lower contents of this dir do not show
        (it, or an ancestor, is opaque or replaced a lower file)."""
        seen: set[str] = set()
        for name, st in self._list(dir_fd, rel):
            path = rel + name
            seen.add(name)
            before = lookup_entry(base, name)
            mode = st.st_mode
            if stat.S_ISCHR(mode) and st.st_rdev == 0:
                # An overlay whiteout: the lower entry (file or whole subtree) is deleted.
                self._delete(before, path)
            elif stat.S_ISDIR(mode):
                if isinstance(before, pygit2.Blob):
                    self.change.deleted.add(path)
                sub_fd = self._open_dir(dir_fd, name, st, path, depth)
                if sub_fd is None:
                    self._delete(before, path)
                    continue
                try:
                    sub_base = before if isinstance(before, pygit2.Tree) else None
                    opaque = _is_opaque(sub_fd)
                    self.walk_upper(
                        sub_fd, path + "/", sub_base, hidden=hidden or opaque, depth=depth + 1
                    )
                finally:
                    os.close(sub_fd)
            elif stat.S_ISREG(mode):
                if isinstance(before, pygit2.Tree):
                    self._delete(before, path)
                    before = None
                self._file(dir_fd, name, st, path, before)
            else:
                self._refuse_special(st, path)
                self._delete(before, path)
        if hidden and base is not None:
            for name, entry in entries(base):
                if name not in seen:
                    self._delete(entry, rel + name)

    # -- copy fallback: lstat everything, hash what the identity says changed -----

    def walk_copy(
        self,
        dir_fd: int,
        rel: str,
        base: pygit2.Tree,
        identities: dict[str, Identity],
        *,
        depth: int,
    ) -> None:
        for name, st in self._list(dir_fd, rel):
            path = rel + name
            mode = st.st_mode
            if stat.S_ISDIR(mode):
                sub_fd = self._open_dir(dir_fd, name, st, path, depth)
                if sub_fd is None:
                    continue
                try:
                    self.walk_copy(sub_fd, path + "/", base, identities, depth=depth + 1)
                finally:
                    os.close(sub_fd)
            elif stat.S_ISREG(mode):
                recorded = identities.get(path)
                if recorded is not None and recorded == (
                    st.st_ino,
                    st.st_size,
                    st.st_mtime_ns,
                    st.st_ctime_ns,
                ):
                    self.present.add(path)
                    continue
                before = lookup_entry(base, path)
                self._file(dir_fd, name, st, path, before)
            else:
                self._refuse_special(st, path)

    # -- shared ---------------------------------------------------------------------

    def _list(self, dir_fd: int, rel: str) -> list[tuple[str, os.stat_result]]:
        """The entries of a directory with lstat results; bad names are refused here."""
        result = []
        try:
            with os.scandir(dir_fd) as it:
                found = list(it)
        except OSError as exc:
            raise SnapshotError(f"cannot list {rel or '.'} in the checkout: {exc}") from exc
        for entry in found:
            name = entry.name
            try:
                name.encode("utf-8")
            except UnicodeEncodeError:
                self._problem(_shown(rel, name), "bad-name", "name is not valid UTF-8")
                continue
            if _CONTROL.search(name):
                self._problem(_shown(rel, name), "bad-name", "name contains a control character")
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError as exc:
                raise SnapshotError(f"cannot lstat {rel + name!r}: {exc}") from exc
            result.append((name, st))
        return result

    def _open_dir(
        self, dir_fd: int, name: str, st: os.stat_result, path: str, depth: int
    ) -> int | None:
        if depth + 1 >= MAX_DEPTH:
            self._problem(path, "too-deep", f"more than {MAX_DEPTH} directory levels")
            return None
        try:
            fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
        except OSError as exc:
            self._open_failed(exc, path)
            return None
        if not _same_inode(os.fstat(fd), st, stat.S_ISDIR):
            os.close(fd)
            self._problem(path, "special-file", "entry changed while being read")
            return None
        return fd

    def _file(
        self,
        dir_fd: int,
        name: str,
        st: os.stat_result,
        path: str,
        before: pygit2.Object | None,
    ) -> None:
        self.present.add(path)
        if st.st_nlink > 1:
            self._problem(path, "hard-link", f"file has {st.st_nlink} links")
            return
        most = self.limit
        if st.st_size > self.limit:
            if st.st_size > self.keep_left:
                self._not_kept(path, st.st_size)
                return
            most = self.keep_left
        try:
            fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
        except OSError as exc:
            self._open_failed(exc, path)
            return
        try:
            now = os.fstat(fd)
            if not _same_inode(now, st, stat.S_ISREG) or now.st_nlink != 1:
                self._problem(path, "special-file", "entry changed while being read")
                return
            data = _read_at_most(fd, most + 1)
        finally:
            os.close(fd)
        if len(data) > most:  # it grew while being read
            self._not_kept(path, len(data))
            return
        if len(data) > self.limit:
            self.keep_left -= len(data)  # validation refuses it by its size
        executable = bool(now.st_mode & 0o111)
        oid = pygit2.hash(data)
        if (
            isinstance(before, pygit2.Blob)
            and before.id == oid
            and is_executable(before) == executable
        ):
            return  # copied up or touched, but the same file as at base
        if oid.raw not in self.batch and oid not in self.stored:
            self.batch.add(_BLOB, data, oid.raw)
        self.change.written[path] = FileState(blob=str(oid), size=len(data), executable=executable)

    def _not_kept(self, path: str, size: int) -> None:
        detail = f"{size} bytes, over the {self.limit}-byte limit"
        if self.keep_bound:
            detail += (
                f"; not kept: files over it may total {self.keep_bound} bytes "
                "(knowledge.candidate_max_bytes)"
            )
        self._problem(path, "file-too-large", detail)

    def _refuse_special(self, st: os.stat_result, path: str) -> None:
        if stat.S_ISLNK(st.st_mode):
            self._problem(path, "symlink", "symbolic link (not followed)")
        else:
            kind = _special_kind(st.st_mode)
            self._problem(path, "special-file", f"{kind} (not opened)")

    def _open_failed(self, exc: OSError, path: str) -> None:
        # ELOOP: it became a symlink; ENXIO: a socket/fifo without a peer. Either way
        # the entry is not what lstat said; anything else is the host's problem.
        if exc.errno in (errno.ELOOP, errno.ENXIO, errno.ENOENT, errno.ENOTDIR):
            self._problem(path, "special-file", f"entry changed while being read ({exc})")
            return
        raise SnapshotError(f"cannot open {path!r} in the checkout: {exc}") from exc

    def _delete(self, before: pygit2.Object | None, path: str) -> None:
        if isinstance(before, pygit2.Tree):
            for name, entry in entries(before):
                self._delete(entry, f"{path}/{name}")
        elif before is not None:
            self.change.deleted.add(path)

    def _problem(self, path: str, rule: str, detail: str) -> None:
        self.change.problems.append(Violation(path, rule, f"{RULES[rule]}: {detail}"))


def _read_at_most(fd: int, limit: int) -> bytes:
    chunks = []
    remaining = limit
    while remaining > 0:
        chunk = os.read(fd, min(remaining, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def _same_inode(now: os.stat_result, was: os.stat_result, is_kind: Callable[[int], bool]) -> bool:
    return bool(is_kind(now.st_mode)) and (now.st_dev, now.st_ino) == (was.st_dev, was.st_ino)


def _is_opaque(dir_fd: int) -> bool:
    try:
        return os.getxattr(dir_fd, OPAQUE_XATTR) == b"y"
    except OSError as exc:
        if exc.errno in (errno.ENODATA, errno.ENOTSUP):
            return False
        raise SnapshotError(f"cannot read overlay xattrs: {exc}") from exc


def _special_kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "fifo"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISCHR(mode):
        return "character device"
    if stat.S_ISBLK(mode):
        return "block device"
    return f"file of type {stat.S_IFMT(mode):o}"


def _shown(rel: str, name: str) -> str:
    """A refused name as printable text: the repr of its bytes."""
    return repr(os.fsencode(rel + name))


__all__ = ["CHECK_MEMORY_BYTES", "MAX_DEPTH", "CheckTooLarge", "SnapshotError", "snapshot"]
