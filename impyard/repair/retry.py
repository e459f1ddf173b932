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
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pygit2

from impyard import backup
from impyard.errors import ImpyardError, KnowledgeError, NotFoundError
from impyard.home import Home
from impyard.knowledge.change import Change, FileState, KnowledgeLimits, Violation
from impyard.knowledge.imps import open_repo
from impyard.knowledge.increments import Landed, landed_by, split
from impyard.knowledge.lane import (
    LaneCheckpoint,
    checkpoint_number,
    keep_candidate,
    run_commits,
)
from impyard.knowledge.snapshot import snapshot
from impyard.policy.compile import policy_for_run
from impyard.queue import leases
from impyard.queue.db import opened
from impyard.repair import kept, records
from impyard.repair.preserved import Kind, base_of, ref_of, tree_change
from impyard.runs import manifest as manifests
from impyard.runs.landing import integrate_run, trailers
from impyard.runs.model import EXIT_CODES, Manifest, RepairRecord
from impyard.settings import Settings

#: What a refused retry's owner is told: a retry cannot fix what the box wrote.
RETRY_ADVICE = (
    "retry re-validates the same files against today's policy, so it only helps after a "
    "policy change (edit the policy, then `impyard deploy`); to fix the content, re-run the "
    "task, or queue a rework for the imp to fix it: `impyard {noun} rework {run}`"
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

    @property
    def landed(self) -> bool:
        return self.outcome in ("integrated", "empty")

    @property
    def advice(self) -> str | None:
        """What to do next when the change was refused for its content again."""
        if self.outcome != "rejected":
            return None
        noun = "candidates" if self.kind == "candidate" else "quarantine"
        return RETRY_ADVICE.format(noun=noun, run=self.run_id)

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.outcome]

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "run_id": self.run_id,
            "imp": self.imp,
            "ref": self.ref,
            "outcome": self.outcome,
            "landed": self.landed,
            "checkpoint": self.checkpoint,
            "source": self.source,
            "commit": self.commit,
            "violations": [v.as_dict() for v in self.violations],
            "candidate_ref": self.candidate_ref,
            "warnings": self.warnings,
            "advice": self.advice,
        }


def retry(settings: Settings, kind: Kind, run_id: str, *, from_ref: bool = False) -> RetryResult:
    """Re-validate the run's preserved change against main and land it, or say why not."""
    home = Home(settings.home)
    with records.owning(home, run_id) as m:
        ref = ref_of(kind, run_id)
        repo = open_repo(home, m.imp)
        if ref not in repo.references:
            raise NotFoundError(_missing(m, kind, ref))
        policy, warnings = policy_for_run(home, m.imp, strict=settings.strict_policy)
        if not policy.knowledge.enabled:
            raise ImpyardError(
                f"knowledge is disabled by policy for imp {m.imp!r} (knowledge.enabled = "
                f"false): nothing is integrated; {ref} is kept"
            )
        limits = KnowledgeLimits.of(policy.knowledge)
        sha = str(repo.lookup_reference(ref).peel(pygit2.Commit).id)
        if base_of(repo, sha) != m.base_commit:
            raise KnowledgeError(f"{ref} is not built on run {run_id}'s base {m.base_commit}")

        earlier = records.pending(m, "retry", kind)
        number = earlier.checkpoint if earlier and earlier.checkpoint else _next_number(repo, m)
        landed = _landed(repo, m, excluding=number)
        change, source = _change(repo, m, kind, sha, limits, landed, from_ref=from_ref)
        parts = split(change, landed)
        if parts.increment.is_empty and not parts.touched:
            raise ImpyardError(_nothing_to_land(m, kind, ref, change))
        if earlier is None:
            record = records.new_record("retry", kind, ref, checkpoint=number, detail=source)
            records.begin(home, m, record)
        else:  # a retry a dead host left: the same number, now by whoever finishes it
            record = earlier
            fresh = records.new_record("retry", kind, ref)
            record.by, record.at, record.detail = fresh.by, fresh.at, source

        exit_trailers = trailers(m, number, at_exit=True)
        with _lease(home, m, settings.lease_ttl_seconds):
            lane = integrate_run(
                home,
                m,
                change,
                limits,
                number=number,
                at_exit=True,
                landed=landed,
                keep_refused=False,
            )
        outcome = lane.checkpoint
        if outcome == "empty" and lane.violations:
            outcome = "rejected"  # nothing new to land, and changes to landed files refused
        result = RetryResult(
            kind,
            run_id,
            m.imp,
            ref,
            outcome,
            number,
            source,
            commit=lane.commit,
            violations=lane.violations,
            warnings=warnings,
        )
        if result.landed:
            if parts.touched:  # files the run had landed stay refused, kept as the box left them
                result.candidate_ref = keep_candidate(
                    repo,
                    parts.kept,
                    exit_trailers,
                    lane.checkpoint,
                    lane.violations,
                    gone=parts.gone,
                ).candidate_ref
            _settle_landed(home, repo, m, record, result, sha)
        else:
            record.outcome, record.violations = outcome, len(lane.violations)
            manifests.write(home, m)
            records.journal(home, record, run_id=run_id, imp=m.imp, violations=lane.violations)
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


def _nothing_to_land(m: Manifest, kind: Kind, ref: str, change: Change) -> str:
    """Why a retry refused to act: the preserved change adds nothing to main."""
    noun = "candidates" if kind == "candidate" else "quarantine"
    what = (
        "holds no change against the run's base"
        if change.is_empty
        else "holds nothing the run has not already landed"
    )
    return (
        f"nothing to land: {ref} {what}; it is kept (`impyard {noun} show {m.run_id}` "
        f"says why it was preserved, `impyard {noun} drop {m.run_id}` removes it)"
    )


def _change(
    repo: pygit2.Repository,
    m: Manifest,
    kind: Kind,
    sha: str,
    limits: KnowledgeLimits,
    landed: Landed,
    *,
    from_ref: bool,
) -> tuple[Change, str]:
    """The run's whole change against its base, and where it was read."""
    if kind == "quarantine" and not from_ref and kept.is_kept(m):
        try:
            with kept.readable(m) as checkout:
                return snapshot(repo, checkout, limits), "checkout"
        except ImpyardError as exc:
            raise ImpyardError(
                f"cannot read the kept checkout of run {m.run_id}: {exc}; "
                f"`retry --from-ref` uses the tree of {ref_of(kind, m.run_id)} instead"
            ) from exc
    # A preserved tree holds only what had not landed: what did is added back as it landed.
    change = tree_change(repo, sha)
    for path, was in landed.items():
        if path in change.written or path in change.deleted:
            continue
        if was is None:
            change.deleted.add(path)
        else:
            change.written[path] = FileState(was.blob, was.size, was.executable)
    return change, "ref"


def _landed(repo: pygit2.Repository, m: Manifest, *, excluding: int) -> Landed:
    """What the run's commits on main landed (mid-run and exit checkpoints, earlier
    retries), read from the commits; not the one numbered ``excluding``, which is this
    retry's own if an earlier attempt landed it."""
    commits = [
        str(c.id)
        for c in run_commits(repo, m.run_id, m.base_commit)
        if checkpoint_number(c) != excluding
    ]
    return landed_by(repo, reversed(commits))


def _next_number(repo: pygit2.Repository, m: Manifest) -> int:
    numbers = [checkpoint_number(c) for c in run_commits(repo, m.run_id, m.base_commit)]
    return max([len(m.landed_checkpoints), *numbers]) + 1


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


def _missing(m: Manifest, kind: Kind, ref: str) -> str:
    """Why there is nothing to retry: a retry already landed it, or it was dropped."""
    for record in reversed(m.repairs):
        if record.kind != kind or record.ref != ref:
            continue
        if record.action == "retry" and record.outcome in ("integrated", "empty"):
            landed = f" as {record.commit}" if record.commit else ""
            return f"no {ref}: already landed{landed} (retried by {record.by} at {record.at})"
        if record.action == "drop" and record.outcome == "dropped":
            return f"no {ref}: dropped by {record.by} at {record.at}"
    return f"no {ref}: run {m.run_id} has no {kind} kept"


__all__ = ["RetryResult", "retry"]
