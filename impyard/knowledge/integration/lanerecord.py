"""What a lane commit says and what the lane answers: the trusted trailers, the result
of an integration, the message of a lane commit, the candidate ref that keeps what main
does not take, and how an integration ends (``Outcome``). Reading the run's commits on
main back (``find_landed_commit``, ``run_commits``) lives here too.

Everything here serves ``lane``, which re-exports the public names.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Literal, cast

import pygit2

from impyard.common.errors import KnowledgeError, UsageError
from impyard.home import Home
from impyard.knowledge.change import Change, Mode, Violation
from impyard.knowledge.imps import open_repo
from impyard.knowledge.integration.quarantine import deleted_trailers, preserved_commit
from impyard.knowledge.store.history import lane_commits_since
from impyard.knowledge.store.refnames import candidate_ref
from impyard.knowledge.store.repo import imp_signature, main_commit
from impyard.knowledge.validation.citations import Citation, trailer_lines
from impyard.knowledge.validation.increments import Split
from impyard.knowledge.validation.violations import digest

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
    #: A rework run: the rejected run whose files it started from.
    rework_of: str | None = None
    #: The engine runtime the box that wrote it ran under (runc or runsc).
    runtime: str = "runc"

    def lines(self) -> list[str]:
        values = {
            "Impyard-Imp": self.imp,
            "Impyard-Run": self.run,
            "Impyard-Task": self.task or "-",
            "Impyard-Channel": self.channel or "-",
            "Impyard-Base": self.base,
            "Impyard-Mode": self.mode,
            "Impyard-Runtime": self.runtime,
            "Impyard-Checkpoint": f"{self.checkpoint} ({'exit' if self.at_exit else 'mid-run'})",
        }
        if self.rework_of is not None:
            values["Impyard-Rework-Of"] = self.rework_of
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


@dataclass
class Outcome:
    """How one integration ends, with the refused changes to checkpointed files (if any)
    reported, and kept at the candidate ref when the lane keeps what it refuses."""

    home: Home
    parts: Split
    trailers: Trailers
    keep_refused: bool

    def landed(self, checkpoint: LaneCheckpoint, commit: str | None = None) -> LaneResult:
        touched = self.parts.touched
        result = LaneResult(checkpoint, commit=commit, violations=list(touched))
        if touched and self.keep_refused:
            # The refused state is kept as the box left it, a deletion included.
            result.candidate_ref = keep_candidate(
                self._repo(),
                self.parts.kept,
                self.trailers,
                checkpoint,
                touched,
                gone=self.parts.gone,
            ).candidate_ref
        return result

    def refused(self, checkpoint: LaneCheckpoint, violations: list[Violation]) -> LaneResult:
        every = [*violations, *self.parts.touched]
        if not self.keep_refused:
            return LaneResult(checkpoint, violations=every)
        return keep_candidate(
            self._repo(), self.parts.kept, self.trailers, checkpoint, every, gone=self.parts.gone
        )

    def _repo(self) -> pygit2.Repository:
        """Opened only to keep a candidate (most integrations keep none)."""
        return open_repo(self.home, self.trailers.imp)


def commit_message(change: Change, trailers: Trailers, cited: list[Citation]) -> str:
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


def keep_candidate(
    repo: pygit2.Repository,
    change: Change,
    trailers: Trailers,
    checkpoint: LaneCheckpoint,
    violations: list[Violation],
    *,
    gone: Iterable[str] = (),
) -> LaneResult:
    """Keep a change main will not take at refs/candidates/<run-id>, with its reasons in
    the commit message; the only writer of candidate refs. ``gone``: files the run had
    landed that ``change`` (the box's final tree) no longer holds, named in trailers."""
    listing = "\n".join(digest(violations).lines())
    commit = preserved_commit(
        repo,
        trailers.base,
        change,
        summary=f"Candidate of run {trailers.run} ({checkpoint}; not on main)",
        details=[f"Violations:\n{listing}"],
        author=imp_signature(trailers.imp),
        trailers=[*trailers.lines(), *deleted_trailers(gone)],
    )
    ref = candidate_ref(trailers.run)
    repo.references.create(ref, pygit2.Oid(hex=commit), force=True)
    return LaneResult(checkpoint, violations=violations, candidate_ref=ref)


def commits_since(repo: pygit2.Repository, base: str, head: str) -> list[pygit2.Commit]:
    """Commits on main's first-parent chain after ``base`` up to ``head``, newest first."""
    return [cast(pygit2.Commit, repo[c.sha]) for c in lane_commits_since(repo, base, head)]


def run_commits(repo: pygit2.Repository, run_id: str, base: str) -> Iterator[pygit2.Commit]:
    """The commits of run ``run_id`` on main since ``base``, newest first."""
    try:
        since = lane_commits_since(repo, base, main_commit(repo))
    except KnowledgeError:
        return
    for landed in since:
        if landed.run == run_id:
            yield cast(pygit2.Commit, repo[landed.sha])


def find_landed_commit(
    repo: pygit2.Repository, run_id: str, base: str, checkpoint: int = 1
) -> str | None:
    """The commit on main since ``base`` of checkpoint ``checkpoint`` of ``run_id``, if any."""
    try:
        since = lane_commits_since(repo, base, main_commit(repo))
    except KnowledgeError:
        return None
    for landed in since:
        if landed.run == run_id and landed.checkpoint == checkpoint:
            return landed.sha
    return None


__all__ = [
    "LaneCheckpoint",
    "LaneResult",
    "Outcome",
    "Trailers",
    "candidate_ref",
    "commit_message",
    "commits_since",
    "find_landed_commit",
    "keep_candidate",
    "run_commits",
]
