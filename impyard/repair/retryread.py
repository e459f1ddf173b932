"""What a retry reads before it acts, shared by a retry and its dry run: the preserved
ref and the commit it names, the imp's current policy, the checkpoint number, what the
run already landed, the run's whole change (from the kept checkout or the ref) and its
split against what landed; and the paths a landing changes on main.

Reading writes nothing: a retry records and integrates after it, a dry run does not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import pygit2

from impyard.common.errors import ImpyardError, KnowledgeError, NotFoundError
from impyard.home import Home
from impyard.knowledge.change import Change, FileState, KnowledgeLimits
from impyard.knowledge.checkouts.snapshot import snapshot
from impyard.knowledge.checkouts.treefs import is_blob, is_executable
from impyard.knowledge.imps import open_repo
from impyard.knowledge.integration import bulkdelete
from impyard.knowledge.integration.lane import checkpoint_number, run_commits
from impyard.knowledge.store.gitobj import changed_paths, commit_at, lookup_entry
from impyard.knowledge.store.repo import main_commit
from impyard.knowledge.validation.increments import Landed, Split, landed_by, split
from impyard.policy.compile import policy_for_run
from impyard.repair import kept, records
from impyard.repair.preserved import Kind, base_of, misplaced, ref_of, tree_change
from impyard.runs.records.model import Manifest, RepairRecord
from impyard.settings import Settings


@dataclass
class Reading:
    """A preserved change as a retry of it now would integrate it."""

    m: Manifest
    kind: Kind
    repo: pygit2.Repository
    ref: str
    #: The commit the ref named when read: the only one a landing retry removes.
    sha: str
    limits: KnowledgeLimits
    warnings: list[str]
    #: The checkpoint number the retry lands under (a dead host's pending retry's, reused).
    number: int
    earlier: RepairRecord | None
    landed: Landed
    change: Change
    #: Where the change was read: the kept ``checkout`` or the ``ref``'s tree.
    source: str
    parts: Split


def read_change(
    settings: Settings,
    m: Manifest,
    kind: Kind,
    *,
    from_ref: bool,
    action: Literal["retry", "approve"] = "retry",
) -> Reading:
    """Read run ``m``'s preserved ``kind``, or raise why a retry of it cannot even start
    (no ref, knowledge disabled, another base, nothing to land). An ``approve`` reads
    it under today's limits with the deletion gate lifted (``bulkdelete.approved``)."""
    home = Home(settings.home)
    ref = ref_of(kind, m.run_id)
    repo = open_repo(home, m.imp)
    if ref not in repo.references:
        raise NotFoundError(misplaced(repo, kind, m.run_id) or _missing(m, kind, ref))
    policy, warnings = policy_for_run(home, m.imp, strict=settings.strict_policy)
    if not policy.knowledge.enabled:
        raise ImpyardError(
            f"knowledge is disabled by policy for imp {m.imp!r} (knowledge.enabled = "
            f"false): nothing is integrated; {ref} is kept"
        )
    limits = KnowledgeLimits.of(policy.knowledge)
    if action == "approve":
        limits = bulkdelete.approved(limits)
    sha = str(repo.lookup_reference(ref).peel(pygit2.Commit).id)
    if base_of(repo, sha) != m.base_commit:
        if not repo.odb.exists(m.base_commit):
            noun = "candidates" if kind == "candidate" else "quarantine"
            raise KnowledgeError(
                f"run {m.run_id}'s base {m.base_commit} is gone from the history (a "
                f"knowledge purge rewrote it): `impyard {noun} rework {m.run_id}` has its "
                "imp redo the change on today's main"
            )
        raise KnowledgeError(f"{ref} is not built on run {m.run_id}'s base {m.base_commit}")

    earlier = records.pending(m, action, kind)
    number = earlier.checkpoint if earlier and earlier.checkpoint else _next_number(repo, m)
    landed = _landed(repo, m, excluding=number)
    change, source = _change(repo, m, kind, sha, limits, landed, from_ref=from_ref)
    parts = split(change, landed)
    if parts.increment.is_empty and not parts.touched:
        raise ImpyardError(_nothing_to_land(m, kind, ref, change))
    return Reading(
        m, kind, repo, ref, sha, limits, warnings, number, earlier, landed, change, source, parts
    )


def would_change(repo: pygit2.Repository, increment: Change) -> tuple[list[str], list[str]]:
    """The paths landing ``increment`` on main's head would write and delete (a file main
    already holds as it is is not written again)."""
    tree = commit_at(repo, main_commit(repo)).tree
    written = sorted(
        path for path, state in increment.written.items() if not _holds(tree, path, state)
    )
    deleted = sorted(path for path in increment.deleted if lookup_entry(tree, path) is not None)
    return written, deleted


def changed_by(repo: pygit2.Repository, commit: str) -> tuple[list[str], list[str]]:
    """The paths lane commit ``commit`` wrote and deleted against its first parent."""
    landed = commit_at(repo, commit)
    parent = landed.parents[0].tree if landed.parents else None
    written: list[str] = []
    deleted: list[str] = []
    for path in changed_paths(parent, landed.tree):
        (deleted if lookup_entry(landed.tree, path) is None else written).append(path)
    return sorted(written), sorted(deleted)


def _holds(tree: pygit2.Tree, path: str, state: FileState) -> bool:
    entry = lookup_entry(tree, path)
    if entry is None or not is_blob(entry):
        return False
    return str(entry.id) == state.blob and is_executable(entry) == state.executable


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
