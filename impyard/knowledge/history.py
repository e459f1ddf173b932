"""Main's first-parent history as cached facts: each lane commit's parent, run and
checkpoint number, and the paths it changed.

Everything the lane asks of history ("did this run's checkpoint land since its
base?", "what landed since the base that this change clashes with?") walks the
commits between a run's base and the head. A group of runs landed together
asks it once per run, against a head that grows by one commit per run, so
re-reading and re-diffing every commit each time made a group of n runs cost
n² commit reads and tree diffs (500 runs from one base: minutes at 100,000
records). A commit never changes, so what was learned about it by its id
stays true in every repository that holds it: the facts are kept per process,
bounded, and read once per commit.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import cast

import pygit2

from impyard.errors import KnowledgeError
from impyard.knowledge.gitobj import changed_paths

#: How many commits' facts, and how many changed paths in all, the process remembers.
MAX_COMMITS = 65_536
MAX_PATHS = 1 << 20


@dataclass(frozen=True)
class LaneCommit:
    """What the lane needs to know of one commit on main."""

    sha: str
    parent: str | None
    #: The ``Impyard-Run`` trailer (None for commits the lane did not make).
    run: str | None
    #: Which checkpoint of its run it is (``checkpoint_number``).
    checkpoint: int


def checkpoint_number(commit: pygit2.Commit) -> int:
    """Which checkpoint of its run a lane commit is (commits before mid-run checkpoints: 1)."""
    value = commit.message_trailers.get("Impyard-Checkpoint", "1")
    number = value.split(" ", 1)[0]
    return int(number) if number.isdigit() else 0


class _Facts:
    """The process-wide cache; every thread's lane calls share it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._commits: OrderedDict[str, LaneCommit] = OrderedDict()
        self._paths: OrderedDict[str, tuple[str, ...]] = OrderedDict()
        self._path_count = 0

    def commit(self, repo: pygit2.Repository, sha: str) -> LaneCommit:
        with self._lock:
            known = self._commits.get(sha)
            if known is not None:
                self._commits.move_to_end(sha)
                return known
        commit = cast(pygit2.Commit, repo[sha])
        parents = commit.parent_ids
        facts = LaneCommit(
            sha=sha,
            parent=str(parents[0]) if parents else None,
            run=commit.message_trailers.get("Impyard-Run"),
            checkpoint=checkpoint_number(commit),
        )
        with self._lock:
            self._commits[sha] = facts
            while len(self._commits) > MAX_COMMITS:
                self._commits.popitem(last=False)
        return facts

    def paths(self, repo: pygit2.Repository, landed: LaneCommit) -> tuple[str, ...]:
        with self._lock:
            known = self._paths.get(landed.sha)
            if known is not None:
                self._paths.move_to_end(landed.sha)
                return known
        commit = cast(pygit2.Commit, repo[landed.sha])
        parent = commit.parents[0].tree if commit.parents else None
        found = tuple(changed_paths(parent, commit.tree))
        with self._lock:
            if landed.sha not in self._paths:
                self._paths[landed.sha] = found
                self._path_count += len(found)
            while self._path_count > MAX_PATHS and len(self._paths) > 1:
                _, dropped = self._paths.popitem(last=False)
                self._path_count -= len(dropped)
        return found


_FACTS = _Facts()


def lane_commit(repo: pygit2.Repository, sha: str) -> LaneCommit:
    return _FACTS.commit(repo, sha)


def changed_by(repo: pygit2.Repository, landed: LaneCommit) -> tuple[str, ...]:
    """The file paths ``landed`` changed against its first parent."""
    return _FACTS.paths(repo, landed)


def lane_commits_since(repo: pygit2.Repository, base: str, head: str) -> list[LaneCommit]:
    """The commits on ``head``'s first-parent chain after ``base``, newest first."""
    found: list[LaneCommit] = []
    current = head
    while current != base:
        facts = lane_commit(repo, current)
        found.append(facts)
        if facts.parent is None:
            raise KnowledgeError(f"base {base} is not an ancestor of main ({head})")
        current = facts.parent
    return found
