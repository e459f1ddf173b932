"""The integration lane: one per imp, serialized across threads and processes.

A validated change is replayed onto the latest ``main`` — never textually
merged: the change is a set of written and deleted paths, and only the trees
on those paths are rebuilt — then re-checked against what landed since the
run's base (path collisions, duplicate ids, repository size), committed with
trusted trailers and published by compare-and-swap of ``main``.

A run may checkpoint more than once (mid-run, then at exit): each lane commit
carries the run and the checkpoint's number in its trailers, only the part of
the change that is new since the run's last checkpoint is integrated
(``increments``), and the run's own earlier commits are not collisions.

A lane commit ends with its ``Impyard-*`` trailers, then one ``Source-Receipt``
trailer per fetch receipt the records it adds cite (``citations``).

Crash safety: a host that dies after moving ``main`` but before recording the
outcome re-integrates the checkpoint on restart; ``find_landed_commit`` sees the
run's ``Impyard-Run`` and ``Impyard-Checkpoint`` trailers on main and returns
that commit instead of landing it twice.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal, cast

import pygit2

from impyard.errors import KnowledgeError, UsageError
from impyard.fsutil import locked
from impyard.home import Home
from impyard.knowledge.change import Change, KnowledgeLimits, Mode, Violation
from impyard.knowledge.citations import Citation, Receipts, trailer_lines
from impyard.knowledge.clashes import landed_name_clashes
from impyard.knowledge.gitobj import changed_paths
from impyard.knowledge.imps import open_repo
from impyard.knowledge.increments import Landed, Split, split
from impyard.knowledge.origin import sync_origin
from impyard.knowledge.quarantine import preserved_commit
from impyard.knowledge.records import ORGANIZATION, parse_record_path
from impyard.knowledge.repo import MAIN, host_signature, imp_signature, main_commit
from impyard.knowledge.sizes import record_tree_bytes, size_delta, tree_bytes
from impyard.knowledge.trees import PathConflict, build_tree
from impyard.knowledge.validate import REPO_PATH, check_change
from impyard.knowledge.violations import digest
from impyard.names import check_run_id

LaneCheckpoint = Literal["integrated", "empty", "rejected", "conflict"]


@dataclass(frozen=True)
class Trailers:
    """The trusted provenance written into every lane commit (all host-issued)."""

    imp: str
    run: str
    task: str | None
    channel: str | None
    base: str
    mode: Mode
    #: Which checkpoint of the run this is (1 for a run that only checkpoints at exit).
    checkpoint: int = 1
    #: The exit checkpoint, or one the box asked for while it ran.
    at_exit: bool = True

    def lines(self) -> list[str]:
        values = {
            "Impyard-Imp": self.imp,
            "Impyard-Run": self.run,
            "Impyard-Task": self.task or "-",
            "Impyard-Channel": self.channel or "-",
            "Impyard-Base": self.base,
            "Impyard-Mode": self.mode,
            "Impyard-Checkpoint": f"{self.checkpoint} ({'exit' if self.at_exit else 'mid-run'})",
        }
        for key, value in values.items():
            if not value or any(ch in value for ch in "\r\n") or value != value.strip():
                raise UsageError(f"trailer {key} has an unusable value {value!r}")
        return [f"{key}: {value}" for key, value in values.items()]


@dataclass
class LaneResult:
    checkpoint: LaneCheckpoint
    commit: str | None = None
    violations: list[Violation] = field(default_factory=list)
    candidate_ref: str | None = None


def candidate_ref(run_id: str) -> str:
    return f"refs/candidates/{run_id}"


def integrate(
    home: Home,
    imp: str,
    change: Change,
    *,
    base: str,
    namespace: str,
    mode: Mode,
    limits: KnowledgeLimits,
    trailers: Trailers,
    landed: Landed | None = None,
    keep_refused: bool = True,
    receipts: Receipts | None = None,
) -> LaneResult:
    """Validate, then land ``change`` on main (or keep it as a candidate); never lands twice.

    ``change`` is the run's whole change against ``base``; ``landed`` is what the run's
    earlier checkpoints landed (``increments.landed_by``). ``keep_refused`` False (a mid-run
    checkpoint: the box is alive and can fix its files) keeps no candidate ref for what
    main does not take; the violations are the answer. ``receipts`` are the run's fetch
    receipts by id (default: none, so a note citing one is refused).
    """
    check_run_id(trailers.run)
    if (trailers.imp, trailers.base, trailers.mode) != (imp, base, mode):
        raise UsageError("trailers disagree with the run being integrated (imp, base or mode)")
    trailers.lines()  # refuse unusable trailer values before any work
    repo = open_repo(home, imp)
    parts = split(change, landed or {})
    increment = parts.increment
    outcome = _Outcome(repo, parts, trailers, keep_refused)
    if increment.is_empty:
        return outcome.landed("empty")
    found = find_landed_commit(repo, trailers.run, base, trailers.checkpoint)
    if found is not None:
        return outcome.landed("integrated", found)

    checked = check_change(
        repo,
        base,
        parts.effective,
        namespace=namespace,
        mode=mode,
        limits=limits,
        receipts=receipts,
    )
    if checked.violations:
        return outcome.refused("rejected", checked.violations)
    # Notes an earlier checkpoint landed had their receipts in that checkpoint's commit.
    cited = [c for path in increment.written for c in checked.citations.get(path, ())]
    message = _message(increment, trailers, cited)

    with locked(home.lane_lock(imp)):
        found = find_landed_commit(repo, trailers.run, base, trailers.checkpoint)
        if found is not None:
            return outcome.landed("integrated", found)
        head = main_commit(repo)
        head_commit = cast(pygit2.Commit, repo[head])
        conflicts = _recheck(repo, base, head, increment, namespace, mode, trailers.run)
        if conflicts:
            return outcome.refused("conflict", conflicts)
        try:
            tree = build_tree(repo, head_commit.tree, increment.written, increment.deleted)
        except PathConflict as exc:
            clash = Violation(exc.path, "collision", "main now has a file/directory clash here")
            return outcome.refused("conflict", [clash])
        if tree == head_commit.tree_id:
            return outcome.landed("empty")
        total = tree_bytes(repo, head) + size_delta(
            repo, head_commit.tree, increment.written, increment.deleted
        )
        if total > limits.max_repo_bytes:
            too_large = Violation(
                REPO_PATH,
                "repo-too-large",
                f"main would hold {total} bytes; max_repo_bytes is {limits.max_repo_bytes}",
            )
            return outcome.refused("rejected", [too_large])
        commit = repo.create_commit(
            None, imp_signature(imp), host_signature(), message + "\n", tree, [head_commit.id]
        )
        _compare_and_swap_main(repo, head, commit)
        record_tree_bytes(repo, str(commit), total)
        sync_origin(repo, home.origin(imp))
    return outcome.landed("integrated", str(commit))


@dataclass
class _Outcome:
    """How one integration ends, with the refused changes to checkpointed files (if any)
    reported, and kept at the candidate ref when the lane keeps what it refuses."""

    repo: pygit2.Repository
    parts: Split
    trailers: Trailers
    keep_refused: bool

    def landed(self, checkpoint: LaneCheckpoint, commit: str | None = None) -> LaneResult:
        touched = self.parts.touched
        result = LaneResult(checkpoint, commit=commit, violations=list(touched))
        if touched and self.keep_refused and self.parts.kept_back:
            kept = Change(written=dict(self.parts.kept_back))
            result.candidate_ref = keep_candidate(
                self.repo, kept, self.trailers, checkpoint, touched
            ).candidate_ref
        return result

    def refused(self, checkpoint: LaneCheckpoint, violations: list[Violation]) -> LaneResult:
        every = [*violations, *self.parts.touched]
        if not self.keep_refused:
            return LaneResult(checkpoint, violations=every)
        return keep_candidate(self.repo, self.parts.rest, self.trailers, checkpoint, every)


def _message(change: Change, trailers: Trailers, cited: list[Citation]) -> str:
    """Summary line, then one trailer block: the Impyard-* trailers, then Source-Receipt."""
    block = [*trailers.lines(), *trailer_lines(cited)]
    return "\n\n".join([_summary(change, trailers), "\n".join(block)])


def _summary(change: Change, trailers: Trailers) -> str:
    added = sum(1 for p in change.written if p.startswith("records/"))
    other = len(change.written) - added
    parts = [f"{added} record(s)"]
    if other:
        parts.append(f"{other} organization file(s)")
    if change.deleted:
        parts.append(f"{len(change.deleted)} deletion(s)")
    which = f"run {trailers.run}"
    if not (trailers.at_exit and trailers.checkpoint == 1):
        which += f" checkpoint {trailers.checkpoint}"
    return f"{trailers.imp}: {trailers.mode} {which} ({', '.join(parts)})"


def _compare_and_swap_main(repo: pygit2.Repository, old: str, new: pygit2.Oid) -> None:
    """Move main from ``old`` to ``new`` only if it still points at ``old``."""
    ref = repo.lookup_reference(MAIN)
    if str(ref.target) != old:
        raise KnowledgeError(f"main moved outside the lane (expected {old}, found {ref.target})")
    try:
        ref.set_target(new, f"impyard lane: {old[:12]} -> {str(new)[:12]}")
    except pygit2.GitError as exc:  # libgit2 refuses when the stored value is not ``old``
        raise KnowledgeError(f"main moved outside the lane while integrating: {exc}") from exc


def keep_candidate(
    repo: pygit2.Repository,
    change: Change,
    trailers: Trailers,
    checkpoint: LaneCheckpoint,
    violations: list[Violation],
) -> LaneResult:
    """Keep a change main will not take at refs/candidates/<run-id>, with its reasons in
    the commit message; the only writer of candidate refs."""
    listing = "\n".join(digest(violations).lines())
    commit = preserved_commit(
        repo,
        trailers.base,
        change,
        summary=f"Candidate of run {trailers.run} ({checkpoint}; not on main)",
        details=[f"Violations:\n{listing}"],
        author=imp_signature(trailers.imp),
        trailers=trailers.lines(),
    )
    ref = candidate_ref(trailers.run)
    repo.references.create(ref, pygit2.Oid(hex=commit), force=True)
    return LaneResult(checkpoint, violations=violations, candidate_ref=ref)


def commits_since(repo: pygit2.Repository, base: str, head: str) -> list[pygit2.Commit]:
    """Commits on main's first-parent chain after ``base`` up to ``head``, newest first."""
    found: list[pygit2.Commit] = []
    current = cast(pygit2.Commit, repo[head])
    while str(current.id) != base:
        found.append(current)
        if not current.parents:
            raise KnowledgeError(f"base {base} is not an ancestor of main ({head})")
        current = current.parents[0]
    return found


def checkpoint_number(commit: pygit2.Commit) -> int:
    """Which checkpoint of its run a lane commit is (commits before mid-run checkpoints: 1)."""
    value = commit.message_trailers.get("Impyard-Checkpoint", "1")
    number = value.split(" ", 1)[0]
    return int(number) if number.isdigit() else 0


def run_commits(repo: pygit2.Repository, run_id: str, base: str) -> Iterator[pygit2.Commit]:
    """The commits of run ``run_id`` on main since ``base``, newest first."""
    try:
        since = commits_since(repo, base, main_commit(repo))
    except KnowledgeError:
        return
    for commit in since:
        if commit.message_trailers.get("Impyard-Run") == run_id:
            yield commit


def find_landed_commit(
    repo: pygit2.Repository, run_id: str, base: str, checkpoint: int = 1
) -> str | None:
    """The commit on main since ``base`` of checkpoint ``checkpoint`` of ``run_id``, if any."""
    for commit in run_commits(repo, run_id, base):
        if checkpoint_number(commit) == checkpoint:
            return str(commit.id)
    return None


def recheck(
    repo: pygit2.Repository, base: str, change: Change, namespace: str, mode: Mode, run_id: str
) -> list[Violation]:
    """What landed on main since ``base`` that ``change`` now clashes with (reads only)."""
    return _recheck(repo, base, main_commit(repo), change, namespace, mode, run_id)


def _recheck(
    repo: pygit2.Repository,
    base: str,
    head: str,
    change: Change,
    namespace: str,
    mode: Mode,
    run_id: str,
) -> list[Violation]:
    """What landed since ``base`` that this change now clashes with: O(changes since base)."""
    if head == base:
        return []
    touched = set(change.written) | set(change.deleted)
    ours = {
        name.note_id: path
        for path in change.written
        if (name := parse_record_path(path)) is not None and name.namespace == namespace
    }
    org_prefix = ORGANIZATION + "/"
    touches_org = any(p.startswith(org_prefix) for p in touched)
    found: list[Violation] = []
    landed: list[str] = []
    for commit in commits_since(repo, base, head):
        if commit.message_trailers.get("Impyard-Run") == run_id:
            continue  # an earlier checkpoint of this run; ``increments`` handles its files
        parent = commit.parents[0]
        for path in changed_paths(parent.tree, commit.tree):
            landed.append(path)
            if path in touched:
                found.append(
                    Violation(path, "collision", f"changed on main by {str(commit.id)[:12]}")
                )
            elif mode == "reorganize" and touches_org and path.startswith(org_prefix):
                # Impossible under the reorganization lease; checked anyway.
                found.append(
                    Violation(
                        path,
                        "collision",
                        f"organization/ changed on main by {str(commit.id)[:12]}",
                    )
                )
            name = parse_record_path(path)
            if name is not None and name.note_id in ours and path != ours[name.note_id]:
                found.append(
                    Violation(
                        ours[name.note_id],
                        "duplicate-id",
                        f"id {name.note_id} landed on main as {path}",
                    )
                )
    # A name that differs from ours only in case or Unicode form may have landed meanwhile.
    head_tree = cast(pygit2.Commit, repo[head]).tree
    found.extend(landed_name_clashes(head_tree, landed, change))
    return found
