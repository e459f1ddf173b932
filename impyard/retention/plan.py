"""What a gc at ``now`` would remove, as data: a dry run is exactly this.

Reads only. Each kind has its own planner; the plan lists runs first (refs, kept
checkouts, records), then what they leave unneeded (checkout layers, with the chains
of records the plan drops no longer counted), engine volumes, archived bodies, spare
run spaces, finished queue tasks, trust bundles no run record links to (links from
records the plan drops not counted), canonical repositories holding a backlog of loose
objects to fold, and the journal when it is due for rotation.
"""

from __future__ import annotations

import os
import sqlite3
import stat
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from impyard.common.errors import ImpyardError
from impyard.common.names import utc_epoch, utc_stamp
from impyard.gateway.provenance.archive import Archive
from impyard.home import Home
from impyard.knowledge.checkouts.layers import unneeded_layers
from impyard.knowledge.checkouts.runspace import spares_dir
from impyard.knowledge.imps import list_imps
from impyard.policy.compile import deployed_org_policy
from impyard.queue import tasks
from impyard.queue.db import opened
from impyard.retention.model import (
    BUNDLE_DAYS,
    DAY_SECONDS,
    SPARE_DAYS,
    GcItem,
    GcKind,
    GcPlan,
    Limits,
    age_days,
)
from impyard.retention.objects import plan_loose_objects
from impyard.retention.rotation import rotation_item
from impyard.retention.runs import plan_runs
from impyard.retention.volumes import VolumeStore, plan_helpers, plan_volumes


def plan_gc(
    home: Home, *, now: float, volumes: VolumeStore, limits: Limits | None = None
) -> GcPlan:
    """The plan under ``limits`` (default: the deployed org policy's)."""
    limits = limits or Limits.of(deployed_org_policy(home))
    notes: list[str] = []
    items = plan_runs(home, limits, now, notes)
    dropped = {item.id for item in items if item.kind in ("kept_checkout", "run_dir")}
    items.extend(plan_layers(home, dropped, now, notes))
    items.extend(plan_helpers(home, volumes, notes))
    items.extend(plan_volumes(home, volumes, now, notes))
    items.extend(plan_archive(home, limits, now))
    items.extend(plan_spares(home, now))
    items.extend(plan_tasks(home, limits, now, notes))
    records = {item.id for item in items if item.kind == "run_dir"}
    items.extend(plan_bundles(home, records, now))
    items.extend(plan_loose_objects(home, notes))
    rotation = rotation_item(home.journal, limits.journal_max_bytes)
    if rotation is not None:
        items.append(rotation)
    return GcPlan(now=now, limits=limits, items=items, notes=notes)


def plan_layers(home: Home, dropped_runs: set[str], now: float, notes: list[str]) -> list[GcItem]:
    items = []
    for imp in list_imps(home):
        try:
            layers = unneeded_layers(home, imp, (), ignore_runs=dropped_runs)
        except (ImpyardError, OSError) as exc:
            notes.append(f"imp {imp!r}: checkout layers were not checked: {exc}")
            continue
        for layer in layers:
            try:
                built = (layer.path / "meta.json").stat().st_mtime
            except OSError:
                built = None
            items.append(
                GcItem(
                    kind="layer",
                    id=layer.id,
                    path=str(layer.path),
                    reason=f"no checkout chain needs it ({layer.kind} layer of commit "
                    f"{layer.commit[:12]})",
                    age_days=age_days(now, built),
                    imp=imp,
                )
            )
    return items


def plan_archive(home: Home, limits: Limits, now: float) -> list[GcItem]:
    if not home.archive_dir.is_dir():
        return []
    days = limits.archive_retention_days
    items = []
    for stored in Archive(home.archive_dir).stale(days, now=now):
        age = age_days(now, stored.mtime)
        items.append(
            GcItem(
                kind="archive_object",
                id=stored.sha256,
                path=str(stored.path),
                reason=f"not fetched for {age:.1f} days; gateway.archive.retention_days = {days}",
                age_days=age,
                bytes=stored.size,
            )
        )
    return items


def plan_spares(home: Home, now: float) -> list[GcItem]:
    items = []
    for path, found in _files(spares_dir(home), "*.img*"):
        age = age_days(now, found.st_mtime)
        if age is not None and age > SPARE_DAYS:
            reason = f"no run took it in {SPARE_DAYS:g} day"
            items.append(_file_item("spare_space", path, found, reason, age))
    return items


def _files(directory: Path, pattern: str) -> Iterator[tuple[Path, os.stat_result]]:
    """Each entry of ``directory`` matching ``pattern``, in name order, with its ``lstat``
    (a symlink is never followed); one that vanished meanwhile is passed over."""
    for path in sorted(directory.glob(pattern)) if directory.is_dir() else []:
        try:
            yield path, path.lstat()
        except FileNotFoundError:
            continue


def _file_item(kind: GcKind, path: Path, found: os.stat_result, reason: str, age: float) -> GcItem:
    """A file to remove, named by its file name, with the space it takes on disk."""
    return GcItem(
        kind=kind,
        id=path.name,
        path=str(path),
        reason=reason,
        age_days=age,
        bytes=found.st_blocks * 512,
    )


def plan_tasks(home: Home, limits: Limits, now: float, notes: list[str]) -> list[GcItem]:
    """Done and cancelled tasks that finished ``finished_run_days`` ago, like run records.
    The ``namespaces`` table is never looked at: it keeps every run's namespace unique."""
    if not home.db.exists():
        return []
    days = limits.finished_run_days
    cutoff = utc_stamp(now - days * DAY_SECONDS)  # as finished_at is written: compared as text
    try:
        with opened(home.db) as conn:
            finished = tasks.finished_before(conn, cutoff)
    except sqlite3.Error as exc:
        notes.append(f"finished tasks were not checked: {exc}")
        return []
    items = []
    for task in finished:
        age = age_days(now, utc_epoch(task.finished_at or ""))
        when = f"{age:.1f} days ago" if age is not None else f"at {task.finished_at}"
        items.append(
            GcItem(
                kind="task",
                id=task.id,
                path=str(home.db),
                reason=f"finished ({task.state}) {when}; retention.finished_run_days = {days:g}",
                age_days=age,
                imp=task.imp,
                run=task.run_id,
            )
        )
    return items


def plan_bundles(home: Home, dropped_records: set[str], now: float) -> list[GcItem]:
    """Shared trust bundles no run record links to (each run's ``ca-bundle.pem`` is a hard
    link to one, so a bundle's own name is its last link), written over BUNDLE_DAYS ago.
    Links from the records in ``dropped_records`` are not counted: they go first."""
    directory = home.box_bundles_dir
    if not directory.is_dir():
        return []
    dropping: Counter[tuple[int, int]] = Counter()
    for run in dropped_records:
        try:
            link = home.run_ca_bundle(run).lstat()
        except OSError:
            continue
        if stat.S_ISREG(link.st_mode):
            dropping[(link.st_dev, link.st_ino)] += 1
    items = []
    for path, found in _files(directory, "*.pem"):
        if not stat.S_ISREG(found.st_mode):
            continue  # a symlink is never taken for a bundle
        leaving = dropping[(found.st_dev, found.st_ino)]
        age = age_days(now, found.st_mtime)
        if found.st_nlink - leaving != 1 or age is None or age <= BUNDLE_DAYS:
            continue
        whose = "only run records this gc removes link" if leaving else "no run record links"
        reason = f"{whose} to it; written {age:.1f} days ago"
        items.append(_file_item("box_bundle", path, found, reason, age))
    return items
