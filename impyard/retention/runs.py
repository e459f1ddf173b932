"""What retention lets go of runs: old quarantine and candidate refs, a quarantined run's
kept checkout, and whole run records.

A run is only ever considered once it is finished and no live process owns it. A run
record goes only when no ref still points at the run: a quarantine or candidate kept
for longer than ``finished_run_days`` keeps the manifest that explains it.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass
from typing import Literal

import pygit2

from impyard.common.errors import ImpyardError
from impyard.common.names import RUN_ID, utc_epoch
from impyard.home import Home
from impyard.knowledge.imps import list_imps, open_repo
from impyard.knowledge.store.refnames import candidate_ref, quarantine_ref
from impyard.retention.model import GcItem, Limits, age_days
from impyard.runs.records import manifest as manifests
from impyard.runs.records.model import Manifest
from impyard.runs.records.owner import RunOwnership

RefKind = Literal["quarantine_ref", "candidate_ref"]
_PREFIXES: dict[str, RefKind] = {
    quarantine_ref(""): "quarantine_ref",
    candidate_ref(""): "candidate_ref",
}


@dataclass(frozen=True)
class RunRef:
    imp: str
    kind: RefKind
    name: str
    run: str
    commit_time: float | None


def run_refs(home: Home, imp: str) -> list[RunRef]:
    """The imp's quarantine and candidate refs (raises ImpyardError when unreadable)."""
    repo = open_repo(home, imp)
    found = []
    try:
        for name in repo.references:
            for prefix, kind in _PREFIXES.items():
                run = name.removeprefix(prefix)
                if name.startswith(prefix) and RUN_ID.fullmatch(run):
                    found.append(RunRef(imp, kind, name, run, _commit_time(repo, name)))
    except pygit2.GitError as exc:
        raise ImpyardError(f"imp {imp!r}: cannot list the refs of {home.repo(imp)}: {exc}") from exc
    return found


def _commit_time(repo: pygit2.Repository, name: str) -> float | None:
    try:
        return float(repo.references[name].peel(pygit2.Commit).commit_time)
    except (KeyError, ValueError, pygit2.GitError):
        return None


def ended_epoch(home: Home, manifest: Manifest) -> float | None:
    """When the run finished; older records without ``ended_at`` count from their
    creation, then from the manifest's last write."""
    for stamp in (manifest.ended_at, manifest.created_at):
        epoch = utc_epoch(stamp) if stamp else None
        if epoch is not None:
            return epoch
    try:
        return home.manifest(manifest.run_id).stat().st_mtime
    except OSError:
        return None


def is_settled(home: Home, manifest: Manifest) -> bool:
    """Finished, and no live process is still acting on it."""
    return manifest.is_terminal and not RunOwnership.is_held(home, manifest.run_id)


def plan_runs(home: Home, limits: Limits, now: float, notes: list[str]) -> list[GcItem]:
    """Refs and run records past their limits. Manifests are read one at a time (a ref's
    when its ref is judged, then every run's in turn): a data root keeps a month of runs
    by default, and holding all of them at once made each gc's memory grow with them."""
    items: list[GcItem] = []
    kept_refs: Counter[str] = Counter()
    unread: set[str] = set()  # imps whose refs are unknown: none of their runs may go
    for imp in list_imps(home):
        try:
            refs = run_refs(home, imp)
        except ImpyardError as exc:
            notes.append(f"{exc}; its runs are kept")
            unread.add(imp)
            continue
        for ref in refs:
            item = _ref_item(home, ref, manifests.read_or_none(home, ref.run), limits, now)
            if item is None:
                kept_refs[ref.run] += 1
            else:
                items.append(item)
    for manifest in manifests.each(home):
        if not is_settled(home, manifest):
            continue
        age = age_days(now, ended_epoch(home, manifest))
        if age is None:
            continue
        if manifest.checkpoint == "quarantined" and age > limits.quarantine_days:
            kept = kept_checkout_item(home, manifest, age, limits)
            if kept is not None:
                items.append(kept)
        expired = age > limits.finished_run_days
        if expired and not kept_refs[manifest.run_id] and manifest.imp not in unread:
            items.append(run_dir_item(home, manifest, age, limits))
    return items


def _ref_item(
    home: Home, ref: RunRef, manifest: Manifest | None, limits: Limits, now: float
) -> GcItem | None:
    if manifest is not None and not is_settled(home, manifest):
        return None
    if manifest is None and RunOwnership.is_held(home, ref.run):
        return None
    since = "the run ended"
    epoch = ended_epoch(home, manifest) if manifest is not None else None
    if epoch is None:
        # A ref without a run record (removed by hand, or from another host): its commit
        # was written when the run ended.
        epoch, since = ref.commit_time, "its commit (no run record)"
    age = age_days(now, epoch)
    limit = limits.quarantine_days if ref.kind == "quarantine_ref" else limits.candidate_days
    if age is None or age <= limit:
        return None
    key = "quarantine_days" if ref.kind == "quarantine_ref" else "candidate_days"
    return GcItem(
        kind=ref.kind,
        id=ref.run,
        path=ref.name,
        reason=f"{age:.1f} days since {since}; retention.{key} = {limit:g}",
        age_days=age,
        imp=ref.imp,
        run=ref.run,
    )


def kept_checkout_item(home: Home, manifest: Manifest, age: float, limits: Limits) -> GcItem | None:
    """The quarantined run's kept checkout, if anything of it is still on disk."""
    run = manifest.run_id
    image = home.run_space_image(run)
    pieces = [image, home.run_space(run), home.run_checkout_record(run)]
    if manifest.checkout is not None:
        pieces.append(manifest.checkout.root)
    if not any(os.path.lexists(p) for p in pieces):
        return None
    try:
        used = os.lstat(image).st_blocks * 512  # sparse: what it really takes
    except OSError:
        used = None
    return GcItem(
        kind="kept_checkout",
        id=run,
        path=str(image if os.path.lexists(image) else home.run_space(run)),
        reason=f"quarantined {age:.1f} days ago; retention.quarantine_days = "
        f"{limits.quarantine_days:g}",
        age_days=age,
        imp=manifest.imp,
        run=run,
        bytes=used,
    )


def run_dir_item(home: Home, manifest: Manifest, age: float, limits: Limits) -> GcItem:
    return GcItem(
        kind="run_dir",
        id=manifest.run_id,
        path=str(home.run_dir(manifest.run_id)),
        reason=f"finished ({manifest.checkpoint}) {age:.1f} days ago, no ref points at it; "
        f"retention.finished_run_days = {limits.finished_run_days:g}",
        age_days=age,
        imp=manifest.imp,
        run=manifest.run_id,
    )
