"""Main's first-parent history as cached facts: each lane commit's parent, run and
checkpoint number and the paths it changed; and, for a commit the lane makes, what it
added.

Everything the lane asks of history ("did this run's checkpoint land since its
base?", "what landed since the base that this change clashes with?") walks the
commits between a run's base and the head. A group of runs landed together
asks it once per run, against a head that grows by one commit per run, so
re-reading and re-diffing every commit each time made a group of n runs cost
n² commit reads and tree diffs (500 runs from one base: minutes at 100,000
records). A commit never changes, so what was learned about it by its id
stays true in every repository that holds it: the facts are kept per process,
bounded, and read once per commit. The lane records what a commit it makes
changed (``remember_added``) from the few paths it wrote, so neither
the rest of its pass nor the origin refresh after it diffs that commit's trees (the
pass hands the refresh what its commits added; nothing here keeps that).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import cast

import pygit2

from impyard.common.errors import KnowledgeError
from impyard.knowledge.store.gitobj import changed_paths

#: How many commits' facts, and how many changed paths in all, the process remembers:
#: serve's working window, not all of history. The lane asks about the commits between a
#: run's base and main, and a run's base is main when it started: a few commits back per
#: run in flight. A pass reads them once per base and then extends what it read with each
#: commit it makes, so even a burst of 500 runs from one base does not need them all here.
#: A fact further back is read again on a miss (one commit read and one diff of what it
#: changed). Facts take ~2.5 KiB a commit (measured under serve): at 256 they level off
#: under 1 MiB within the first few hundred runs, where serve's memory must stop growing.
MAX_COMMITS = 256
MAX_PATHS = 1 << 12


@dataclass(frozen=True)
class Added:
    """What a lane commit changed and added against its first parent, as the lane knew it
    when it made the commit."""

    #: The file paths it changed, in ``changed_paths`` order.
    paths: tuple[str, ...]
    #: Raw ids of the trees and blobs it holds that its parent does not at the same path.
    objects: frozenset[bytes]
    #: Each of those trees: its directory ('' is the top), raw id, and the raw id of the
    #: tree it replaced there (None: a new directory).
    trees: tuple[tuple[str, bytes, bytes | None], ...]


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
            self._bound_paths()
        return found

    def remember(self, sha: str, added: Added) -> None:
        with self._lock:
            if sha not in self._paths:
                self._paths[sha] = added.paths
                self._path_count += len(added.paths)
            # Here too: under serve the lane made every commit, so ``paths`` never misses.
            self._bound_paths()

    def _bound_paths(self) -> None:
        """Under the lock: forget the oldest commits' paths beyond ``MAX_PATHS`` paths or
        ``MAX_COMMITS`` commits (a lane commit changes a path or two: 2**20 paths alone
        would be a million commits' worth, ~180 MB)."""
        while len(self._paths) > 1 and (
            self._path_count > MAX_PATHS or len(self._paths) > MAX_COMMITS
        ):
            _, dropped = self._paths.popitem(last=False)
            self._path_count -= len(dropped)


_FACTS = _Facts()


def lane_commit(repo: pygit2.Repository, sha: str) -> LaneCommit:
    return _FACTS.commit(repo, sha)


def changed_by(repo: pygit2.Repository, landed: LaneCommit) -> tuple[str, ...]:
    """The file paths ``landed`` changed against its first parent."""
    return _FACTS.paths(repo, landed)


def remember_added(sha: str, added: Added) -> None:
    """Record what lane commit ``sha`` changed, as the lane knew it when it made it."""
    _FACTS.remember(sha, added)


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
