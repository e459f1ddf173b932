"""Crash-safe file writes: write a temp file, fsync, rename, fsync the directory."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_bytes(path: Path, data: bytes, mode: int = 0o644, *, durable: bool = True) -> None:
    """Replace ``path`` with ``data`` so a crash leaves either the old or the new file.

    The temporary name is per process and per thread: two threads writing the same file
    (serve's runs sharing a cache) must not rename each other's half-written file away.
    ``durable=False`` (a cache that is rebuilt when missing or torn) skips both fsyncs:
    readers never see a half-written file, but a host crash may lose or tear it."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{threading.get_ident()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            if durable:
                os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
    if durable:
        fsync_dir(path.parent)


def atomic_write_text(path: Path, text: str, *, durable: bool = True) -> None:
    atomic_write_bytes(path, text.encode(), durable=durable)


def atomic_write_json(path: Path, value: Any, *, durable: bool = True) -> None:
    data = (json.dumps(value, indent=2, sort_keys=True) + "\n").encode()
    atomic_write_bytes(path, data, durable=durable)


@contextlib.contextmanager
def locked(path: Path) -> Iterator[int]:
    """An exclusive advisory lock on ``path`` (created if missing), across threads and processes.

    flock locks belong to the open file description, so each caller opens its own.
    """
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield fd
    finally:
        os.close(fd)


def lock_held(fd: int) -> bool:
    """Whether another open file description holds a lock on ``fd``'s file (its owner is
    alive: a dead process's locks go with it). Takes nothing: a free lock is let go at once."""
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    fcntl.flock(fd, fcntl.LOCK_UN)
    return False


def append_line_durably(path: Path, line: str) -> None:
    """Append one line under an exclusive lock and fsync, so concurrent writers never interleave."""
    append_line(path, line, sync=True)


def append_line(path: Path, line: str, *, sync: bool) -> None:
    """Append one line under an exclusive lock; fsync it only with ``sync``. Without, the
    line is there for every reader at once and outlives the process, and any later
    synced append to the file makes it durable too; a power cut before that may lose it
    (a whole line: the lines before it were synced by their own writers)."""
    data = (line.rstrip("\n") + "\n").encode()
    with locked_append_file(path) as fd:
        os.write(fd, data)
        if sync:
            os.fsync(fd)


@contextlib.contextmanager
def locked_append_file(path: Path, *, create: bool = True) -> Iterator[int]:
    """``path`` opened for appending under its exclusive flock: what every appender holds,
    and what a rotation holds while it renames the file away.

    The lock belongs to the inode, not the name: a writer that opened the file before a
    rotation renamed it would otherwise append to the rotated file once it got the lock
    (lines a compression already read would be lost). So the locked file must still be
    the one at ``path``, else it is opened again. ``create`` False: FileNotFoundError
    when there is no file.
    """
    flags = os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC | (os.O_CREAT if create else 0)
    while True:
        fd = os.open(path, flags, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            held = os.fstat(fd)
            try:
                current = os.stat(path)
            except FileNotFoundError:
                current = None
            if current is not None and (current.st_dev, current.st_ino) == (
                held.st_dev,
                held.st_ino,
            ):
                break
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)
        if not create and current is None:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(path))
    try:
        yield fd
    finally:
        os.close(fd)


def read_jsonl(path: Path) -> tuple[list[dict[str, Any]], list[int]]:
    """Parse a JSON-lines file; return the objects and the 1-based numbers of unreadable lines.

    A host that died mid-append leaves a truncated last line; it is reported, never fatal.
    """
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return [], []
    return parse_jsonl(raw)


def parse_jsonl(raw: bytes) -> tuple[list[dict[str, Any]], list[int]]:
    """``read_jsonl`` of bytes already read (a decompressed file, say)."""
    records: list[dict[str, Any]] = []
    bad: list[int] = []
    for number, line in enumerate(raw.split(b"\n"), start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError):
            bad.append(number)
            continue
        if isinstance(value, dict):
            records.append(value)
        else:
            bad.append(number)
    return records, bad


_DIR_OPEN = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def remove_tree(path: Path) -> None:
    """Delete a tree a box may have written; a missing path is fine.

    ``shutil.rmtree`` recurses once per directory level (a box nesting 1,500 directories
    crashed the host with RecursionError, and every later recovery with it) and holds a
    descriptor per level. This walks with an explicit stack and at most two descriptors,
    descending by ``openat`` and climbing back by ``..``; the box is gone, so nothing
    moves the tree meanwhile. Each directory is read once. It never follows a symlink
    (links are unlinked, not entered), never opens a fifo or device, and depth or path
    length do not matter.
    """
    try:
        if os.path.islink(path) or not os.path.isdir(path):
            os.unlink(path)
            return
    except FileNotFoundError:
        return
    fd = os.open(path, _DIR_OPEN)
    # (this directory's name in its parent, its subdirectories still to remove)
    stack: list[tuple[str, list[str]]] = [("", _unlink_files(fd))]
    try:
        while True:
            name, pending = stack[-1]
            if pending:
                child = pending.pop()
                child_fd = _open_subdir(fd, child)
                os.close(fd)
                fd = child_fd
                stack.append((child, _unlink_files(fd)))
                continue
            stack.pop()
            if not stack:
                break
            parent_fd = os.open("..", _DIR_OPEN, dir_fd=fd)
            os.close(fd)
            fd = parent_fd
            os.rmdir(name, dir_fd=fd)
    finally:
        os.close(fd)
    os.rmdir(path)


def _open_subdir(dir_fd: int, name: str) -> int:
    try:
        return os.open(name, _DIR_OPEN, dir_fd=dir_fd)
    except PermissionError:  # a box may leave a directory mode 000 (the host may not be root)
        os.chmod(name, 0o700, dir_fd=dir_fd)
        return os.open(name, _DIR_OPEN, dir_fd=dir_fd)


def _unlink_files(dir_fd: int) -> list[str]:
    """Unlink every non-directory in ``dir_fd``; return the names of its subdirectories."""
    subdirs = []
    with os.scandir(dir_fd) as entries:
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                subdirs.append(entry.name)
            else:
                os.unlink(entry.name, dir_fd=dir_fd)
    return subdirs
