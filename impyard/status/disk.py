"""What the data root's big parts use on disk, and how much room is left.

A ``du`` of our own, because the trees are partly box-written: it never follows a
symlink, never opens anything but directories (``O_NOFOLLOW``), counts allocated blocks
(``st_blocks``, so a sparse run-space image counts what it really holds), counts a
hard-linked inode once (layers share files by hard links) and stays on each part's
filesystem (a mounted run space is already counted as its image file). It is bounded:
by depth, by entries and by time, and says when it stopped early.
"""

from __future__ import annotations

import contextlib
import os
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from impyard.status.model import DiskSection, DiskUsage

#: Below this share of free space the data root is a problem.
MIN_FREE_RATIO = 0.10
#: The walk's budget over all parts: a screen, not an audit.
MAX_ENTRIES = 500_000
MAX_SECONDS = 3.0
#: Deeper directories are not entered (and the part is marked incomplete).
MAX_DEPTH = 64

_DIR_OPEN = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

Statvfs = Callable[[str], os.statvfs_result]


class _Entries(Protocol):
    """What ``os.scandir`` returns: entries one by one, closed early when the walk stops."""

    def __next__(self) -> os.DirEntry[str]: ...

    def close(self) -> None: ...


@dataclass
class _Budget:
    entries: int = MAX_ENTRIES
    deadline: float = field(default_factory=lambda: time.monotonic() + MAX_SECONDS)
    seen: set[tuple[int, int]] = field(default_factory=set)

    def spent(self) -> bool:
        return self.entries <= 0 or time.monotonic() >= self.deadline


def _walk(top: Path, budget: _Budget) -> tuple[int, bool]:
    """Allocated bytes under ``top`` and whether every entry was counted."""
    try:
        fd = os.open(top, _DIR_OPEN)
    except FileNotFoundError:
        return 0, True
    except OSError:
        return 0, False
    total = 0
    complete = True
    try:
        device = os.fstat(fd).st_dev
    except OSError:
        os.close(fd)
        return 0, False
    # One descriptor per level being read; MAX_DEPTH bounds how many are open.
    stack: list[tuple[int, _Entries]] = []
    try:
        stack.append((fd, os.scandir(fd)))
    except OSError:
        os.close(fd)
        return 0, False
    try:
        while stack:
            dir_fd, entries = stack[-1]
            entry = next(entries, None)
            if entry is None:
                entries.close()
                os.close(dir_fd)
                stack.pop()
                continue
            if budget.spent():
                complete = False
                break
            budget.entries -= 1
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                complete = False
                continue
            if info.st_dev != device:
                continue  # a mount inside the part: counted where it lives (its image)
            if info.st_nlink > 1 and not stat.S_ISDIR(info.st_mode):
                key = (info.st_dev, info.st_ino)
                if key in budget.seen:
                    continue
                budget.seen.add(key)
            total += info.st_blocks * 512
            if not stat.S_ISDIR(info.st_mode):
                continue
            if len(stack) >= MAX_DEPTH:
                complete = False
                continue
            try:
                child = os.open(entry.name, _DIR_OPEN, dir_fd=dir_fd)
            except OSError:
                complete = False
                continue
            try:
                stack.append((child, os.scandir(child)))
            except OSError:
                os.close(child)
                complete = False
    finally:
        for dir_fd, entries in stack:
            entries.close()
            with contextlib.suppress(OSError):
                os.close(dir_fd)
    return total, complete


def usage(parts: dict[str, list[Path]]) -> list[DiskUsage]:
    """Each named part's allocated bytes (a part may span several directories)."""
    budget = _Budget()
    found: list[DiskUsage] = []
    for name, tops in parts.items():
        total, complete = 0, True
        for top in tops:
            size, whole = _walk(top, budget)
            total += size
            complete = complete and whole
        found.append(DiskUsage(name=name, bytes=total, complete=complete))
    return found


def disk_section(
    root: Path,
    parts: dict[str, list[Path]],
    *,
    min_free_ratio: float = MIN_FREE_RATIO,
    statvfs: Statvfs = os.statvfs,
) -> DiskSection:
    try:
        fs = statvfs(str(root))
    except OSError as exc:
        return DiskSection(
            path=str(root),
            total_bytes=0,
            free_bytes=0,
            free_ratio=0.0,
            min_free_ratio=min_free_ratio,
            error=f"statvfs {root}: {exc.strerror or exc}",
        )
    total = fs.f_blocks * fs.f_frsize
    # As run admission counts it: blocks kept for root are no room for the data root.
    free = fs.f_bavail * fs.f_frsize
    return DiskSection(
        path=str(root),
        total_bytes=total,
        free_bytes=free,
        free_ratio=free / total if total else 0.0,
        min_free_ratio=min_free_ratio,
        usage=usage(parts),
    )
