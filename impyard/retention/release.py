"""Removing what a gc plan lets go of runs: their refs, kept checkouts and records.

Each run is handled while gc owns it (``RunOwnership``), so a process that took the run
up since the plan was made keeps it; its manifest is read again under that ownership.
A run record goes only once no quarantine or candidate ref names the run (read again
too: a ref whose deletion failed keeps it). Records are renamed out of ``runs/`` before
they are deleted, so a crash half-way leaves a hidden ``.trash-*`` directory the next gc
removes, never a run directory without its manifest.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pygit2

from impyard.common.errors import ImpyardError, NotFoundError
from impyard.common.fsutil import fsync_dir, remove_tree
from impyard.home import Home
from impyard.knowledge.imps import open_repo
from impyard.knowledge.store.refnames import candidate_ref, quarantine_ref
from impyard.retention.model import GcItem, GcOutcome
from impyard.runs.drive.space import drop_run_space
from impyard.runs.records import manifest as manifests
from impyard.runs.records.model import Manifest
from impyard.runs.records.owner import RunOwnership

TRASH_PREFIX = ".trash-"
# Refs first (a record goes only once none is left), then what is on disk.
_ORDER = {"quarantine_ref": 0, "candidate_ref": 1, "kept_checkout": 2, "run_dir": 3}


def release_run(home: Home, run: str, items: list[GcItem]) -> list[GcOutcome]:
    """Apply every planned item of one run, in a safe order."""
    items = sorted(items, key=lambda item: _ORDER[item.kind])
    with _owned(home, run) as owned:
        if not owned:
            return [GcOutcome(item, "skipped", "a live process owns the run") for item in items]
        manifest = _manifest(home, run)
        if manifest is not None and not manifest.is_terminal:
            return [GcOutcome(item, "skipped", "the run is not finished") for item in items]
        outcomes = []
        for item in items:
            try:
                outcomes.append(_release(home, item, manifest))
            except (ImpyardError, OSError, pygit2.GitError) as exc:
                outcomes.append(GcOutcome(item, "failed", str(exc)))
        return outcomes


def remove_trash(home: Home) -> None:
    """Run records a gc renamed away but did not finish deleting."""
    if not home.runs_dir.is_dir():
        return
    with os.scandir(home.runs_dir) as entries:
        for entry in entries:
            if entry.name.startswith(TRASH_PREFIX) and entry.is_dir(follow_symlinks=False):
                remove_tree(Path(entry.path))


@contextlib.contextmanager
def _owned(home: Home, run: str) -> Iterator[bool]:
    if not home.run_dir(run).is_dir():
        yield True  # a ref without a record: nothing on disk for anyone to own
        return
    owner = RunOwnership.claim(home, run)
    if owner is None:
        yield False
        return
    with owner:
        yield True


def _manifest(home: Home, run: str) -> Manifest | None:
    try:
        return manifests.read(home, run)
    except ImpyardError:
        return None


def _release(home: Home, item: GcItem, manifest: Manifest | None) -> GcOutcome:
    if item.kind in ("quarantine_ref", "candidate_ref"):
        assert item.imp is not None
        repo = open_repo(home, item.imp)
        if repo.references.get(item.path) is None:
            return GcOutcome(item, "skipped", "already gone")
        repo.references.delete(item.path)
        return GcOutcome(item, "removed")
    if manifest is None:
        return GcOutcome(item, "skipped", "the run record is gone")
    if item.kind == "kept_checkout":
        drop_run_space(home, manifest)
        return GcOutcome(item, "removed")
    left = _refs_left(home, manifest)
    if left:
        return GcOutcome(item, "skipped", f"{', '.join(left)} still points at the run")
    drop_run_space(home, manifest)
    run_dir = home.run_dir(manifest.run_id)
    if os.path.ismount(home.run_space(manifest.run_id)):
        return GcOutcome(item, "failed", f"{home.run_space(manifest.run_id)} is still mounted")
    trash = home.runs_dir / f"{TRASH_PREFIX}{manifest.run_id}-{uuid.uuid4().hex[:8]}"
    os.rename(run_dir, trash)
    fsync_dir(home.runs_dir)
    remove_tree(trash)
    return GcOutcome(item, "removed")


def _refs_left(home: Home, manifest: Manifest) -> list[str]:
    try:
        repo = open_repo(home, manifest.imp)
    except NotFoundError:
        return []  # the imp is gone, and its refs with it
    names = (quarantine_ref(manifest.run_id), candidate_ref(manifest.run_id))
    return [name for name in names if repo.references.get(name) is not None]
