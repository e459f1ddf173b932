"""Helpers: what Impyard creates on the engine beside a run's box (the container that reads
an image's CA roots; the overlay probe's box and volume).

Each carries its data root's label, ``LABEL_HELPER`` (its kind) and ``LABEL_LOCK``: a lock
file under the data root that its creator holds (``flock``) for as long as it uses the
helper. A host that dies in between leaves the helper behind and the kernel frees the lock,
so recovery removes every helper of its own data root whose lock is free
(``sweep_helpers``): never another data root's, never one a live process is using.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from impyard.box.docker import engine
from impyard.box.docker.engine import EngineObjectNotFoundError, call
from impyard.box.launcher.launch import remove_box
from impyard.box.spec import LABEL_HELPER, LABEL_LOCK, LABEL_ROOT, LABEL_RUN, box_labels, root_label
from impyard.common.fsutil import lock_held


@dataclass(frozen=True)
class LeftHelper:
    kind: str
    what: str  # container | volume
    name: str  # container id or volume name
    run: str


def helper_labels(root: Path, lock: Path, kind: str, run_id: str, imp: str) -> dict[str, str]:
    """The labels of a helper of kind ``kind`` in the data root at ``root`` while its
    creator holds ``lock`` (a path under ``root``)."""
    relative = os.path.relpath(lock, root)
    return box_labels(run_id, imp, root=root, **{LABEL_HELPER: kind, LABEL_LOCK: relative})


@contextlib.contextmanager
def holding(lock: Path) -> Iterator[None]:
    """Hold ``lock`` (created if missing) exclusively while the block runs."""
    fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def is_held(lock: Path) -> bool:
    """Whether a live process holds ``lock`` now (a missing file: no one does)."""
    try:
        fd = os.open(lock, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        return lock_held(fd)
    finally:
        os.close(fd)


def left_helpers(root: Path) -> list[LeftHelper]:
    """The helpers of the data root at ``root`` whose creator is gone (containers first:
    a volume goes once the container using it has). EngineError when the engine cannot be
    asked."""
    wanted = {"label": [LABEL_HELPER, f"{LABEL_ROOT}={root_label(root)}"]}
    api = engine.api()
    found: list[LeftHelper] = []
    for row in call("list", api.containers, all=True, filters=wanted):
        labels = dict(row.get("Labels") or {})
        if not _in_use(root, labels):
            found.append(_left(labels, "container", str(row["Id"])))
    answer: Any = call("volume list", api.volumes, filters=wanted)
    for raw in (answer or {}).get("Volumes") or []:
        labels, name = dict(raw.get("Labels") or {}), str(raw.get("Name", ""))
        if name and not _in_use(root, labels):
            found.append(_left(labels, "volume", name))
    return found


def remove_helper(left: LeftHelper) -> None:
    """Remove one left helper; already gone is fine."""
    if left.what == "container":
        remove_box(left.name)
        return
    with contextlib.suppress(EngineObjectNotFoundError):
        call("volume remove", engine.api().remove_volume, left.name, volume=left.name)


def sweep_helpers(root: Path) -> list[LeftHelper]:
    """Remove the helpers of the data root at ``root`` whose creator is gone; what was
    removed. EngineError when the engine cannot be asked."""
    found = left_helpers(root)
    for left in found:
        remove_helper(left)
    return found


def _in_use(root: Path, labels: dict[str, str]) -> bool:
    relative = labels.get(LABEL_LOCK, "")
    if not relative or os.path.isabs(relative) or ".." in Path(relative).parts:
        return False  # names no lock under this root: nothing can be holding it
    return is_held(root / relative)


def _left(labels: dict[str, str], what: str, name: str) -> LeftHelper:
    return LeftHelper(labels.get(LABEL_HELPER, ""), what, name, labels.get(LABEL_RUN, ""))
