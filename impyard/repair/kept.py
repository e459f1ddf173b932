"""A quarantined run's kept checkout: where it is, reading it, and removing it.

The checkout is what the box wrote, untrusted to its last byte: it is only ever read by
``knowledge.snapshot`` (lstat first, ``O_NOFOLLOW | O_NONBLOCK``, never past the size
limit), and only removed by walks that never follow a link. A loop space is kept as an
unmounted image; reading mounts it read-only for the duration and unmounts it after.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from impyard.home import Home
from impyard.knowledge.checkouts import runspace
from impyard.knowledge.checkouts.checkout import Checkout
from impyard.runs.drive.space import drop_run_space
from impyard.runs.records.model import Manifest


def is_kept(manifest: Manifest) -> bool:
    """Whether the run still has a checkout to read or remove."""
    checkout, space = manifest.checkout, manifest.space
    if checkout is None:
        return False
    if space is not None and space.kind == "loop" and not os.path.ismount(space.mount):
        return space.image is not None and space.image.is_file()
    return _is_dir(checkout.root)


@contextlib.contextmanager
def readable(manifest: Manifest) -> Iterator[Checkout]:
    """The kept checkout, readable for the block (a kept image mounted read-only)."""
    checkout, space = manifest.checkout, manifest.space
    if checkout is None:
        raise ValueError("the run kept no checkout")  # callers ask is_kept first
    mounted = runspace.mount_read_only(space) if space is not None else False
    try:
        yield checkout
    finally:
        if mounted and space is not None:
            runspace.unmount(space)


def has_space(manifest: Manifest) -> bool:
    """Whether anything of the run's checkout or space is still on disk."""
    space = manifest.space
    if space is not None:
        image = space.image is not None and space.image.exists()
        return image or os.path.lexists(space.mount)
    checkout = manifest.checkout
    return checkout is not None and os.path.lexists(checkout.root)


def remove(home: Home, manifest: Manifest) -> None:
    """Delete the run's checkout and space (a loop space is unmounted first; nothing is
    deleted while it is still mounted) and its checkout record."""
    drop_run_space(home, manifest)


def _is_dir(path: Path) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False
