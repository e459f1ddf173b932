"""Carrying out a gc plan: remove what it lists (each item checked again first), journal
every removal, and rotate the journal last.

One gc at a time per data root (``home.gc_lock``): a command and a serve's periodic gc
never interleave. Every removal is journaled as ``gc.removed`` (kind, id, run, imp)
when it happens, so a gc cut short leaves a record of what it did. The journal is
rotated after everything else, so those lines are in the file that gets rotated and
``journal.rotated``, written to the new live file, follows them in order; the rotation
itself removes no line and gets no ``gc.removed``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
import stat
import time
from collections import defaultdict
from collections.abc import Callable, Iterator

from impyard.common.errors import ImpyardError
from impyard.gateway.provenance.archive import Archive
from impyard.home import Home
from impyard.journal.log import Journal
from impyard.knowledge.checkouts.layers import collect_layers
from impyard.queue import tasks
from impyard.queue.db import opened, transaction
from impyard.retention.model import (
    GcBusyError,
    GcItem,
    GcKind,
    GcOutcome,
    GcPlan,
    GcResult,
)
from impyard.retention.objects import fold_loose_objects
from impyard.retention.plan import plan_gc
from impyard.retention.release import release_run, remove_trash
from impyard.retention.rotation import rotate
from impyard.retention.volumes import (
    EngineVolumes,
    VolumeStore,
    remove_planned_helper,
    remove_planned_volume,
)

_RUN_KINDS: tuple[GcKind, ...] = ("quarantine_ref", "candidate_ref", "kept_checkout", "run_dir")


def run_gc(
    home: Home,
    *,
    now: float | None = None,
    dry_run: bool = False,
    volumes: VolumeStore | None = None,
    journal: Journal | None = None,
) -> GcResult:
    """Plan a gc at ``now`` (default: the clock) and, unless ``dry_run``, apply it.
    GcBusyError when another gc is running."""
    now = time.time() if now is None else now
    store = volumes if volumes is not None else EngineVolumes()
    if dry_run:
        return GcResult(plan_gc(home, now=now, volumes=store), dry_run=True)
    with gc_lock(home):
        plan = plan_gc(home, now=now, volumes=store)
        return apply_gc(home, plan, store, journal or Journal(home.journal))


@contextlib.contextmanager
def gc_lock(home: Home) -> Iterator[None]:
    fd = os.open(home.gc_lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise GcBusyError(f"another gc is running on {home.root}") from None
        yield
    finally:
        os.close(fd)


def apply_gc(home: Home, plan: GcPlan, volumes: VolumeStore, journal: Journal) -> GcResult:
    outcomes: list[GcOutcome] = []

    def done(found: list[GcOutcome]) -> None:
        for outcome in found:
            _journal(journal, outcome)
        outcomes.extend(found)

    remove_trash(home)
    by_run: dict[str, list[GcItem]] = defaultdict(list)
    for item in plan.of_kind(*_RUN_KINDS):
        by_run[item.id].append(item)
    for run, items in by_run.items():
        done(release_run(home, run, items))
    _notify_backup(home, outcomes)
    by_imp: dict[str, list[GcItem]] = defaultdict(list)
    for item in plan.of_kind("layer"):
        by_imp[str(item.imp)].append(item)
    for imp, items in by_imp.items():
        done(_collect_layers(home, imp, items))
    # Helpers first: a probe's volume goes once its box has.
    done([remove_planned_helper(volumes, item) for item in plan.of_kind("helper")])
    for item in plan.of_kind("volume"):
        done([remove_planned_volume(home, volumes, item)])
    done(_prune_archive(home, plan))
    done([_remove_spare(item) for item in plan.of_kind("spare_space")])
    done(_delete_tasks(home, plan.of_kind("task")))
    # After the run records: a bundle planned because its last runs' records go is
    # unlinked only once they are gone.
    done([_remove_bundle(item) for item in plan.of_kind("box_bundle")])
    done([fold_loose_objects(home, item) for item in plan.of_kind("loose_objects")])
    notes = []
    for item in plan.of_kind("journal"):
        outcome = _rotate(home, plan, item)
        outcomes.append(outcome)
        if outcome.status == "rotated":
            journal.record("journal.rotated", file=outcome.detail, bytes=item.bytes)
        elif outcome.status == "failed":
            notes.append(f"the journal was not rotated: {outcome.detail}")
    return GcResult(plan, dry_run=False, outcomes=outcomes, notes=notes)


def _journal(journal: Journal, outcome: GcOutcome) -> None:
    item = outcome.item
    names = {"kind": item.kind, "id": item.id, "run": item.run, "imp": item.imp}
    if outcome.status == "removed":
        journal.record("gc.removed", **names)
    elif outcome.status == "folded":
        journal.record("gc.folded", **names, detail=outcome.detail)
    elif outcome.status == "failed":
        journal.record("gc.failed", **names, error=outcome.detail)


def _notify_backup(home: Home, outcomes: list[GcOutcome]) -> None:
    """Backups mirror candidate and quarantine refs: tell them which imps' refs moved."""
    from impyard.backup import notify

    moved = {
        str(o.item.imp)
        for o in outcomes
        if o.status == "removed" and o.item.kind in ("quarantine_ref", "candidate_ref")
    }
    for imp in sorted(moved):
        notify(home, imp)


def _collect_layers(home: Home, imp: str, items: list[GcItem]) -> list[GcOutcome]:
    try:
        removed = set(collect_layers(home, imp, (), only={item.id for item in items}))
    except (ImpyardError, OSError) as exc:
        return [GcOutcome(item, "failed", str(exc)) for item in items]
    return _outcomes(items, removed, "a checkout chain needs it again")


def _prune_archive(home: Home, plan: GcPlan) -> list[GcOutcome]:
    """Prune by age under the archive's own lock: an object fetched again since the plan
    is kept, and one that aged past the limit since is removed (and listed) too."""
    if not home.archive_dir.is_dir():
        return []
    planned = {item.id: item for item in plan.of_kind("archive_object")}
    days = plan.limits.archive_retention_days
    try:
        report = Archive(home.archive_dir).prune(days, now=plan.now)
    except OSError as exc:
        return [GcOutcome(item, "failed", str(exc)) for item in planned.values()]
    gone = set(report.removed_objects)
    outcomes = [
        GcOutcome(item, "removed") if sha in gone else GcOutcome(item, "skipped", "fetched again")
        for sha, item in planned.items()
    ]
    for sha in sorted(gone - planned.keys()):
        item = GcItem(
            kind="archive_object",
            id=sha,
            path=str(Archive(home.archive_dir).object_path(sha)),
            reason=f"not fetched for {days} days; gateway.archive.retention_days = {days}",
        )
        outcomes.append(GcOutcome(item, "removed"))
    return outcomes


def _remove_spare(item: GcItem) -> GcOutcome:
    """Delete a planned spare image unless a run took it since (it is then gone)."""
    return _unlink(item, "a run took it")


def _unlink(
    item: GcItem, gone: str, kept: Callable[[os.stat_result], str | None] | None = None
) -> GcOutcome:
    """Unlink the file ``item`` plans to remove; skipped ``gone`` when it is not there, or
    with what ``kept`` says of its ``lstat`` right before the unlink."""
    try:
        reason = kept(os.lstat(item.path)) if kept is not None else None
        if reason is not None:
            return GcOutcome(item, "skipped", reason)
        os.unlink(item.path)
    except FileNotFoundError:
        return GcOutcome(item, "skipped", gone)
    except OSError as exc:
        return GcOutcome(item, "failed", str(exc))
    return GcOutcome(item, "removed")


def _delete_tasks(home: Home, items: list[GcItem]) -> list[GcOutcome]:
    """Delete the planned tasks in one transaction, each only while it is still done or
    cancelled: a task that changed meanwhile is left alone."""
    if not items:
        return []
    try:
        with opened(home.db) as conn, transaction(conn):
            gone = {item.id for item in items if tasks.delete_finished(conn, item.id)}
    except sqlite3.Error as exc:
        return [GcOutcome(item, "failed", str(exc)) for item in items]
    return _outcomes(items, gone, "gone already, or no longer finished")


def _outcomes(items: list[GcItem], removed: set[str], kept_because: str) -> list[GcOutcome]:
    """Each item removed when its id is in ``removed``, else skipped ``kept_because``."""
    return [
        GcOutcome(item, "removed")
        if item.id in removed
        else GcOutcome(item, "skipped", kept_because)
        for item in items
    ]


def _remove_bundle(item: GcItem) -> GcOutcome:
    """Delete a planned trust bundle unless a run links to it again (checked right before).

    A run racing with gc keeps its bundle: one that links to it between the check and the
    unlink holds its own link to the same file, and one that finds the name gone as it
    links writes a copy of its own (``write_box_bundle`` falls back when ``os.link``
    fails)."""
    return _unlink(item, "gone already", _bundle_in_use)


def _bundle_in_use(found: os.stat_result) -> str | None:
    if not stat.S_ISREG(found.st_mode):
        return "no longer a regular file"
    if found.st_nlink != 1:
        return "a run links to it again"
    return None


def _rotate(home: Home, plan: GcPlan, item: GcItem) -> GcOutcome:
    try:
        rotation = rotate(home.journal, plan.limits.journal_max_bytes)
    except OSError as exc:
        return GcOutcome(item, "failed", str(exc))
    if rotation is None:
        return GcOutcome(item, "skipped", "no longer over the limit")
    return GcOutcome(item, "rotated", rotation.path.name)
