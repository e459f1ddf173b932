"""Journal rotation: past ``retention.journal_max_bytes`` the live journal becomes
``journal.<n>.jsonl.gz`` (numbers count up, so the newest rotation has the highest one).

Crash-safe and lossless, in two steps:

1. Under the appenders' own lock (``fsutil.locked_append_file``) the live file is renamed
   to ``journal.<n>.jsonl``. A writer waiting for the lock then finds the name points at
   a new file and appends there; none can write to the renamed one afterwards.
2. Outside the lock (appenders never wait for it) that file is compressed to a hidden
   temp file, fsynced, renamed to ``journal.<n>.jsonl.gz``, and only then is the plain
   file unlinked.

A crash after 1 leaves a plain rotated file, which readers read like a compressed one;
a crash in 2 leaves a temp file, or both forms of the same number (readers take the
compressed one, which is complete). The next rotation finishes either. Only gc rotates,
under the data root's gc lock, so no two rotations race.
"""

from __future__ import annotations

import gzip
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from impyard.common.fsutil import fsync_dir, locked_append_file
from impyard.journal.log import rotated_numbers, rotated_path
from impyard.retention.model import GcItem

_CHUNK = 1024 * 1024


@dataclass(frozen=True)
class Rotation:
    number: int
    path: Path  # the compressed file
    bytes: int  # the live file's size when it was rotated


def next_number(live: Path) -> int:
    return max(rotated_numbers(live), default=0) + 1


def rotation_item(live: Path, max_bytes: int) -> GcItem | None:
    """The journal as a plan item when it is over ``max_bytes``."""
    try:
        size = live.stat().st_size
    except FileNotFoundError:
        return None
    if size <= max_bytes:
        return None
    target = rotated_path(live, next_number(live))
    return GcItem(
        kind="journal",
        id=live.name,
        path=str(live),
        reason=f"{size} bytes, over retention.journal_max_bytes = {max_bytes}: rotated to "
        f"{target.name}, every line kept",
        bytes=size,
    )


def rotate(live: Path, max_bytes: int) -> Rotation | None:
    """Rotate the journal if it is (still) over ``max_bytes``; None when it is not."""
    finish_rotations(live)
    try:
        with locked_append_file(live, create=False) as fd:
            size = os.fstat(fd).st_size
            if size <= max_bytes:
                return None
            number = next_number(live)
            plain = rotated_path(live, number, compressed=False)
            os.rename(live, plain)
            fsync_dir(live.parent)
    except FileNotFoundError:
        return None
    return Rotation(number, _compress(plain), size)


def finish_rotations(live: Path) -> None:
    """Complete rotations a crash cut short (see the module docstring)."""
    stem = live.name.removesuffix(".jsonl")
    for leftover in live.parent.glob(f".{stem}.*.jsonl.gz.tmp"):
        leftover.unlink(missing_ok=True)
    for number in rotated_numbers(live):
        plain = rotated_path(live, number, compressed=False)
        if not plain.exists():
            continue
        if rotated_path(live, number).exists():
            plain.unlink()  # the compressed copy was complete before it got its name
            fsync_dir(live.parent)
        else:
            _compress(plain)


def _compress(plain: Path) -> Path:
    target = plain.with_name(plain.name + ".gz")
    temp = plain.with_name(f".{target.name}.tmp")
    try:
        with plain.open("rb") as source, temp.open("wb") as raw:
            with gzip.GzipFile(filename=plain.name, mode="wb", fileobj=raw, mtime=0) as packed:
                shutil.copyfileobj(source, packed, _CHUNK)
            raw.flush()
            os.fsync(raw.fileno())
        os.rename(temp, target)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    fsync_dir(plain.parent)
    plain.unlink()
    fsync_dir(plain.parent)
    return target
