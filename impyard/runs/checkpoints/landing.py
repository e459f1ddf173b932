"""Where a run's checkpoints meet the lane: their trailers, the fetch receipts their notes
may cite, what they landed (read back from their commits), and how a checkpoint a crashed
host left pending is settled."""

from __future__ import annotations

import pygit2

from impyard.common import names
from impyard.gateway.provenance.receipts import Receipt, read_receipts
from impyard.home import Home
from impyard.knowledge.change import Change, KnowledgeLimits
from impyard.knowledge.imps import open_repo
from impyard.knowledge.integration.lane import LaneResult, Trailers, find_landed_commit, integrate
from impyard.knowledge.store.gitobj import changed_paths, commit_at
from impyard.knowledge.validation.increments import Landed, LandedFile, landed_by
from impyard.runs.provision.taint import participant_violations, tainted_refusal
from impyard.runs.records.active import ActiveRun
from impyard.runs.records.model import MAX_LISTED, CheckpointRecord, Manifest


def trailers(m: Manifest, number: int = 1, *, at_exit: bool = True) -> Trailers:
    """What checkpoint ``number`` of this run says in its commit about where it came from
    (all host-issued)."""
    return Trailers(
        imp=m.imp,
        run=m.run_id,
        task=m.task_id or "",
        channel=m.channel or "",
        base=m.base_commit,
        mode=m.mode,
        runtime=m.runtime or "runc",
        checkpoint=number,
        at_exit=at_exit,
        rework_of=m.rework_of,
    )


def run_receipts(home: Home, run_id: str) -> dict[str, Receipt]:
    """The receipts the host's gateway wrote for this run, by id: all a note of the run may
    cite. Read afresh each time, since the gateway appends while the box runs."""
    found = read_receipts(home.run_receipts(run_id))
    # The file is the run's own; a line naming another run is still not this run's receipt.
    return {rid: receipt for rid, receipt in found.items() if receipt.run == run_id}


def integrate_run(
    home: Home,
    m: Manifest,
    change: Change,
    limits: KnowledgeLimits,
    *,
    number: int,
    at_exit: bool,
    landed: Landed,
    keep_refused: bool | None = None,
    dry_run: bool = False,
) -> LaneResult:
    """Checkpoint ``number`` of run ``m`` through its imp's lane: the run's base, namespace,
    mode and receipts, what its earlier checkpoints landed, and its trailers. What main
    refuses is kept as a candidate only at exit (default): mid-run, the box can still fix
    it, and an owner's retry leaves every ref as it was. ``dry_run``: what the lane would
    answer now, writing nothing (``lane.integrate``)."""
    refusal = tainted_refusal(m, limits)
    return integrate(
        home,
        m.imp,
        change,
        base=m.base_commit,
        namespace=m.namespace,
        mode=m.mode,
        limits=limits,
        trailers=trailers(m, number, at_exit=at_exit),
        landed=landed,
        keep_refused=at_exit if keep_refused is None else keep_refused,
        receipts=run_receipts(home, m.run_id),
        dry_run=dry_run,
        refusal=refusal,
        screened=participant_violations(home, m, change) if refusal is None else (),
    )


def landed_files(repo: pygit2.Repository, m: Manifest) -> dict[str, LandedFile | None]:
    """What the run's earlier checkpoints landed (read from their commits)."""
    return LandedCache().files(repo, m)


class LandedCache:
    """``landed_files`` for a box that asks again and again: each checkpoint commit is read
    once (re-reading them all made every request cost ~0.3 ms more per checkpoint)."""

    def __init__(self) -> None:
        self._commits: tuple[str, ...] = ()
        self._files: dict[str, LandedFile | None] = {}

    def files(self, repo: pygit2.Repository, m: Manifest) -> dict[str, LandedFile | None]:
        commits = tuple(c.commit for c in m.landed_checkpoints if c.commit)
        known = len(self._commits)
        if commits[:known] != self._commits:  # not a continuation: read them all again
            self._commits, self._files, known = (), {}, 0
        if len(commits) > known:
            self._files = {**self._files, **landed_by(repo, commits[known:])}
            self._commits = commits
        return self._files


def landed_paths(repo: pygit2.Repository, commit: str) -> list[str]:
    """The paths a lane commit changed against its first parent."""
    landed = commit_at(repo, commit)
    parent = landed.parents[0].tree if landed.parents else None
    return list(changed_paths(parent, landed.tree))


def record_landed(record: CheckpointRecord, commit: str, files: list[str]) -> None:
    record.state, record.commit, record.landed_at = "integrated", commit, names.utc_now()
    record.files, record.file_count = files[:MAX_LISTED], len(files)


def settle_pending(run: ActiveRun) -> list[CheckpointRecord]:
    """After a host crash: a pending checkpoint that reached main is recorded as landed,
    one that did not is dropped (its files are still in the checkout). Returns the settled."""
    m = run.manifest
    pending = [c for c in m.checkpoints if c.state == "pending"]
    if not pending:
        return []
    repo = open_repo(run.home, m.imp)
    for record in pending:
        found = find_landed_commit(repo, m.run_id, m.base_commit, record.number)
        if found is not None:
            record_landed(record, found, landed_paths(repo, found))
        else:
            m.checkpoints.remove(record)
        run.event("knowledge.checkpoint_recovered", checkpoint=record.number, commit=found)
    run.save()
    return pending
