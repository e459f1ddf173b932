"""Retry a preserved change: validate it against the current main and integrate it
through the imp's lane, with the same checks as any checkpoint (never bypassed).

The change: a candidate's commit against its base; a quarantined run's kept checkout,
snapshotted afresh (links, fifos and other refused entries are violations again, never
followed or opened), or the quarantine ref's tree when the checkout is gone (or with
``from_ref``). What the run's earlier commits landed counts as landed, as at its exit.

Policy: the imp's CURRENT effective policy sets the limits, not the ones the run was
admitted under: a change refused for a limit the owner has since raised (and deployed)
lands. That is what a retry is for: it re-validates the same files, so a change refused
for its content is refused again until the task is re-run. ``checkpoint_on_clean_exit``
does not apply: a retry is the owner's own decision.

Nothing to land: a preserved change holding nothing the run has not already landed is
refused before anything is written, and its ref stays. Deleting it there (as an "empty"
landing) lost the only copy of what a run was refused for, and its reasons.

Exactly once: the retry lands under the run's next checkpoint number (an exit trailer),
recorded ``pending`` in the manifest before the lane acts. A host that dies after main
moved leaves that record; the next retry reuses the number, and the lane finds the
commit on main instead of landing it again. The preserved ref is removed only after
that: once main holds the commit and the manifest says so, and only if the ref still
names the commit this retry read. A refused retry writes nothing to Git: the preserved
ref, main and the candidate stay as they were.

Dry run: the same reading (``retryread``), the same validation and the same replay
onto main's head (``lane.integrate(dry_run=True)``), writing nothing: no repair record,
no journal entry, no ref, no lane turn, no lease; the kept checkout stays. It answers
what the retry would do now: land (and which paths it would write and delete on main)
or be refused (and every violation). Main may move before the retry itself, which then
checks again.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import pygit2

from impyard import backup
from impyard.common.errors import ImpyardError, LeaseHeldError, UsageError
from impyard.home import Home
from impyard.knowledge.change import Violation
from impyard.knowledge.integration import bulkdelete
from impyard.knowledge.integration.lane import (
    LaneCheckpoint,
    LaneResult,
    candidate_ref,
    keep_candidate,
)
from impyard.queue import leases
from impyard.queue.db import opened
from impyard.repair import kept, records
from impyard.repair.preserved import Kind
from impyard.repair.retryread import Reading, changed_by, read_change, would_change
from impyard.runs.checkpoints.landing import integrate_run, trailers
from impyard.runs.records import manifest as manifests
from impyard.runs.records.model import EXIT_CODES, Manifest, RepairRecord
from impyard.settings import Settings

#: What a refused retry's owner is told: a retry cannot fix what the box wrote.
RETRY_ADVICE = (
    "retry re-validates the same files against today's policy, so it only helps after a "
    "policy change (edit the policy, then `impyard deploy`); to fix the content, re-run the "
    "task, or queue a rework for the imp to fix it: `impyard {noun} rework {run}`"
)

#: What the owner of a change held for its deletions is told.
APPROVE_ADVICE = (
    "the change is held only for its deletions: `impyard {noun} approve {run} --dry-run` "
    "lists what lands and what goes, and `impyard {noun} approve {run}` lands it"
)


def check_held(m: Manifest) -> None:
    """Approval is for a change held for its deletions alone; anything else is refused
    with what to do instead."""
    if bulkdelete.held(list(m.validation_errors)) is None:
        why = m.reason or (m.validation_errors[0].rule if m.validation_errors else m.checkpoint)
        raise UsageError(
            f"run {m.run_id} is not held for approval ({why}): only a change held for its "
            "deletions (bulk-delete) is approved; `retry` lands one refused under a policy "
            "since changed, `rework` has its imp fix one"
        )


@dataclass
class RetryResult:
    kind: Kind
    run_id: str
    imp: str
    ref: str
    outcome: LaneCheckpoint
    checkpoint: int
    #: Where the change was read: the kept ``checkout`` or the ``ref``'s tree.
    source: str
    commit: str | None = None
    violations: list[Violation] = field(default_factory=list)
    #: Changes to files the run had already landed, kept here after the rest landed.
    candidate_ref: str | None = None
    warnings: list[str] = field(default_factory=list)
    #: What landing changed (a dry run: would change) on main.
    written: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    #: Computed and nothing done (``retry(dry_run=True)``).
    dry_run: bool = False

    @property
    def would_land(self) -> bool:
        return self.outcome in ("integrated", "empty")

    @property
    def landed(self) -> bool:
        return self.would_land and not self.dry_run

    @property
    def advice(self) -> str | None:
        """What to do next when the change was refused for its content again."""
        if self.outcome != "rejected":
            return None
        noun = "candidates" if self.kind == "candidate" else "quarantine"
        if bulkdelete.held(self.violations):
            return APPROVE_ADVICE.format(noun=noun, run=self.run_id)
        return RETRY_ADVICE.format(noun=noun, run=self.run_id)

    @property
    def exit_code(self) -> int:
        return 0 if self.dry_run else EXIT_CODES[self.outcome]

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "run_id": self.run_id,
            "imp": self.imp,
            "ref": self.ref,
            "dry_run": self.dry_run,
            "outcome": self.outcome,
            "landed": self.landed,
            "would_land": self.would_land,
            "checkpoint": self.checkpoint,
            "source": self.source,
            "commit": self.commit,
            "written": self.written,
            "deleted": self.deleted,
            "violations": [v.as_dict() for v in self.violations],
            "candidate_ref": self.candidate_ref,
            "warnings": self.warnings,
            "advice": self.advice,
        }


def retry(
    settings: Settings,
    kind: Kind,
    run_id: str,
    *,
    from_ref: bool = False,
    dry_run: bool = False,
    action: Literal["retry", "approve"] = "retry",
) -> RetryResult:
    """Re-validate the run's preserved change against main and land it, or say why not;
    ``dry_run``: say which, and do nothing. ``approve``: the owner's approval of a change
    held for its deletions (``repair.approve``), which lands it past that gate alone."""
    home = Home(settings.home)
    with records.owning(home, run_id, claim=not dry_run) as m:
        if action == "approve":
            check_held(m)
        r = read_change(settings, m, kind, from_ref=from_ref, action=action)
        if dry_run:
            _lease_free(home, m, settings.lease_ttl_seconds)
            return _result(r, _integrate(home, r, dry_run=True), dry_run=True)
        if r.earlier is None:
            record = records.new_record(action, kind, r.ref, checkpoint=r.number, detail=r.source)
            records.begin(home, m, record)
        else:  # a retry a dead host left: the same number, now by whoever finishes it
            record = r.earlier
            fresh = records.new_record(action, kind, r.ref)
            record.by, record.at, record.detail = fresh.by, fresh.at, r.source

        exit_trailers = trailers(m, r.number, at_exit=True)
        with _lease(home, m, settings.lease_ttl_seconds):
            lane = _integrate(home, r, dry_run=False)
        result = _result(r, lane, dry_run=False)
        if result.landed:
            if r.parts.touched:  # files the run had landed stay refused, kept as the box left them
                result.candidate_ref = keep_candidate(
                    r.repo,
                    r.parts.kept,
                    exit_trailers,
                    lane.checkpoint,
                    lane.violations,
                    gone=r.parts.gone,
                ).candidate_ref
            _settle_landed(home, r.repo, m, record, result, r.sha)
        else:
            record.outcome, record.violations = result.outcome, len(lane.violations)
            manifests.write(home, m)
            records.journal(home, record, run_id=run_id, imp=m.imp, violations=lane.violations)
        return result


def _integrate(home: Home, r: Reading, *, dry_run: bool) -> LaneResult:
    return integrate_run(
        home,
        r.m,
        r.change,
        r.limits,
        number=r.number,
        at_exit=True,
        landed=r.landed,
        keep_refused=False,
        dry_run=dry_run,
    )


def _result(r: Reading, lane: LaneResult, *, dry_run: bool) -> RetryResult:
    """How the retry ends (a dry run: would end), as the owner is told."""
    outcome = lane.checkpoint
    if outcome == "empty" and lane.violations:
        outcome = "rejected"  # nothing new to land, and changes to landed files refused
    result = RetryResult(
        r.kind,
        r.m.run_id,
        r.m.imp,
        r.ref,
        outcome,
        r.number,
        r.source,
        commit=lane.commit,
        violations=lane.violations,
        warnings=r.warnings,
        dry_run=dry_run,
    )
    if result.would_land:
        if lane.commit is not None:
            result.written, result.deleted = changed_by(r.repo, lane.commit)
        elif dry_run:
            result.written, result.deleted = would_change(r.repo, r.parts.increment)
        if dry_run and r.parts.touched:
            result.candidate_ref = candidate_ref(r.m.run_id)  # where the rest would be kept
    return result


def _settle_landed(
    home: Home,
    repo: pygit2.Repository,
    m: Manifest,
    record: RepairRecord,
    result: RetryResult,
    read: str,
) -> None:
    """Record the landing, then remove what is no longer needed: the manifest first, so a
    host that dies between finds the change landed and the next retry only cleans up.
    Called only once main holds the change (``result.commit``): the ref is the one copy
    until then."""
    record.outcome, record.commit = result.outcome, result.commit
    record.violations = len(result.violations) or None
    if record.action == "approve":
        m.reason = None  # held no more: landed
    if result.commit is not None:
        m.checkpoint, m.produced_commit = "integrated", result.commit
    elif m.checkpoint != "integrated":
        m.checkpoint = "integrated" if m.produced_commit else "empty"
    if result.kind == "candidate":
        m.candidate_ref = result.candidate_ref
    else:
        m.quarantine_ref = None
        m.candidate_ref = result.candidate_ref or m.candidate_ref
    manifests.write(home, m)
    records.journal(home, record, run_id=m.run_id, imp=m.imp, violations=result.violations)
    if result.candidate_ref != result.ref and result.commit is not None:
        _remove_ref(repo, result.ref, read, result.warnings)
    backup.notify(home, m.imp)
    if result.kind == "quarantine" and kept.has_space(m):
        try:
            kept.remove(home, m)
        except (ImpyardError, OSError) as exc:
            result.warnings.append(
                f"the kept checkout of run {m.run_id} could not be removed ({exc}); "
                f"`impyard quarantine drop {m.run_id}` removes it"
            )


def _remove_ref(repo: pygit2.Repository, ref: str, read: str, warnings: list[str]) -> None:
    """Delete ``ref`` only if it still names ``read``, the commit this retry landed from
    (the run's owner lock keeps other repairs out; anything else moving it is kept)."""
    reference = repo.references.get(ref)
    if reference is None:
        return
    now = str(reference.peel(pygit2.Commit).id)
    if now != read:
        warnings.append(f"{ref} moved to {now} during the retry (it was {read}): it is kept")
        return
    reference.delete()


@contextlib.contextmanager
def _lease(home: Home, m: Manifest, ttl_seconds: float) -> Iterator[None]:
    """A reorganize change lands under the imp's exclusive lease, as its run did."""
    if m.mode != "reorganize":
        yield
        return
    with opened(home.db) as conn:
        leases.acquire(conn, m.imp, m.run_id, ttl_seconds)
    try:
        yield
    finally:
        with opened(home.db) as conn:
            leases.release(conn, m.imp, m.run_id)


def _lease_free(home: Home, m: Manifest, ttl_seconds: float) -> None:
    """A dry run is refused as ``_lease`` would refuse the retry, holding nothing."""
    if m.mode != "reorganize":
        return
    with opened(home.db) as conn:
        holder = leases.holder_of(conn, m.imp, ttl_seconds)
    if holder is not None and holder != m.run_id:
        raise LeaseHeldError(m.imp, holder)


__all__ = ["RetryResult", "retry"]
