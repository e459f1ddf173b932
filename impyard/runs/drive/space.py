"""A run's space: its checkout's own filesystem, from the spare formatted ahead of the next
run to its release when the run finishes (or its gc, once quarantined)."""

from __future__ import annotations

import functools
import logging

from impyard.home import Home
from impyard.knowledge.checkouts import runspace
from impyard.knowledge.checkouts.checkout import release_checkout
from impyard.knowledge.checkouts.runspace import RunSpace
from impyard.runs.drive.beside import Beside
from impyard.runs.ready.pool import forget_box_dir
from impyard.runs.records.model import Manifest

log = logging.getLogger(__name__)


def spare_beside(home: Home, space: RunSpace | None) -> Beside[None] | None:
    """Format the next run's spare space on a side thread, when this run has a loop space
    (the next one is likely sized alike)."""
    if space is None or space.kind != "loop":
        return None
    return Beside("run-spare", functools.partial(_make_spare, home, space))


def _make_spare(home: Home, space: RunSpace) -> None:
    """Only a speed-up: a spare that cannot be made is formatted by the run that needs it."""
    try:
        runspace.make_spare(home, space.size_bytes)
    except Exception as exc:  # a full disk, a missing tool: the next run formats its own
        log.warning("could not format a spare run space: %s", exc)


def space_full_note(manifest: Manifest) -> str:
    """Appended to the reason when a box stopped with its writable space full."""
    space = manifest.space
    if space is None or not runspace.is_full(space):
        return ""
    return (
        f"; the run's writable space ({space.size_bytes // 2**20} MiB, sized from "
        "knowledge.max_repo_bytes) is full"
    )


def release_run_space(home: Home, manifest: Manifest) -> None:
    """Drop a finished run's checkout and space. A quarantined run keeps it: in a loop
    space as the unmounted image ``space.img`` (mount it read-only to look), which frees
    its loop device."""
    space = manifest.space
    if manifest.checkpoint == "quarantined":
        if manifest.warm and manifest.checkout is not None:
            # A ready box's checkout overlay, mounted on the host: what it kept is its upper
            # dir, read as a cold overlay run's is.
            runspace.unmount_within(manifest.checkout.root.parent)
        if space is not None:
            runspace.unmount(space)
        return
    drop_run_space(home, manifest)


def drop_run_space(home: Home, manifest: Manifest) -> None:
    """Delete a run's checkout and space, kept or not (gc drops a quarantined run's once
    ``retention.quarantine_days`` have passed). Its checkout record goes too, so layer
    collection no longer keeps the chain it named."""
    space = manifest.space
    record = home.run_checkout_record(manifest.run_id)
    if space is not None:
        runspace.release(space)  # the space goes whole, checkout and index included
    if manifest.warm and manifest.checkout is not None:
        # A ready box's checkout is in that box's directory (in its space, when it has one),
        # which goes with its mounts unmounted first.
        forget_box_dir(home, manifest.checkout.root)
        release_checkout(manifest.checkout, record)
    elif space is None and manifest.checkout is not None:
        # Runs from before run spaces kept their checkout in the run dir itself.
        release_checkout(manifest.checkout, record)
    else:
        record.unlink(missing_ok=True)
