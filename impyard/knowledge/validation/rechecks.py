"""What landed on main since a run's base, and what the run's change now clashes with.

Validation judged the change against its base; by the time the lane takes it,
other runs may have landed: the same path (collision), a record with one of its
note ids (duplicate id), a name a case-folding file system would merge with one
of its names (name clash), or, for a reorganize run, anything under
organization/. ``LandedSince`` holds every path that landed after one base,
indexed by path, note id and directory name form, so a recheck looks up only
what its own change touches: O(change), however much landed. A lane pass keeps
one per base and extends it with each commit it makes, so n runs from one base
cost n lookups rather than n walks over a history growing by one each time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pygit2

from impyard.knowledge.change import Change, Mode, Violation
from impyard.knowledge.store.history import LaneCommit, changed_by, lane_commits_since
from impyard.knowledge.store.repo import main_commit
from impyard.knowledge.validation.clashes import landed_name_clashes
from impyard.knowledge.validation.pathnames import normalize_segment
from impyard.knowledge.validation.records import ORGANIZATION, RECORDS, parse_record_path

_ORG_PREFIX = ORGANIZATION + "/"
_RECORDS_PREFIX = RECORDS + "/"


@dataclass(frozen=True)
class _Mark:
    """One path one commit changed; ``order`` sorts newest commit first, then path order."""

    order: tuple[int, int]
    commit: LaneCommit
    path: str


@dataclass
class LandedSince:
    """Every path that landed after ``base`` up to ``head``, with the commit that landed it."""

    base: str
    head: str
    _commits: int = 0
    _by_path: dict[str, list[_Mark]] = field(default_factory=dict)
    _by_note_id: dict[str, list[_Mark]] = field(default_factory=dict)
    #: (directory, name form) -> name -> marks: names a case-folding file system merges.
    _by_form: dict[tuple[str, str], dict[str, list[_Mark]]] = field(default_factory=dict)
    _organization: list[_Mark] = field(default_factory=list)
    _checkpoints: dict[tuple[str, int], str] = field(default_factory=dict)

    @classmethod
    def read(cls, repo: pygit2.Repository, base: str, head: str) -> LandedSince:
        """KnowledgeError when ``base`` is not on ``head``'s first-parent chain."""
        since = cls(base, base)
        for commit in reversed(lane_commits_since(repo, base, head)):
            since.add(repo, commit)
        return since

    def add(self, repo: pygit2.Repository, commit: LaneCommit) -> None:
        """Extend by ``commit``, whose first parent is ``head``."""
        self._commits += 1
        self.head = commit.sha
        if commit.run is not None:
            self._checkpoints[(commit.run, commit.checkpoint)] = commit.sha
        for position, path in enumerate(changed_by(repo, commit)):
            mark = _Mark((-self._commits, position), commit, path)
            self._by_path.setdefault(path, []).append(mark)
            if path.startswith(_ORG_PREFIX):
                self._organization.append(mark)
            if path.startswith(_RECORDS_PREFIX):
                name = parse_record_path(path)
                if name is not None:
                    self._by_note_id.setdefault(name.note_id, []).append(mark)
            directory = ""
            for segment in path.split("/"):
                forms = self._by_form.setdefault((directory, normalize_segment(segment)), {})
                forms.setdefault(segment, []).append(mark)
                directory = f"{directory}/{segment}" if directory else segment

    def landed(self, run_id: str, checkpoint: int) -> str | None:
        """The newest commit of checkpoint ``checkpoint`` of ``run_id`` since ``base``."""
        return self._checkpoints.get((run_id, checkpoint))

    def clashes(
        self,
        head_tree: Callable[[], pygit2.Tree],
        change: Change,
        namespace: str,
        mode: Mode,
        run_id: str,
    ) -> list[Violation]:
        """What landed since ``base`` (by other runs) that ``change`` now clashes with.

        ``head_tree`` gives ``head``'s tree, asked only when a landed name may clash. The
        run's own earlier checkpoints are not clashes: ``increments`` handles their files."""
        if not self._commits:
            return []
        touched = set(change.written) | set(change.deleted)
        ours = {
            name.note_id: path
            for path in change.written
            if (name := parse_record_path(path)) is not None and name.namespace == namespace
        }
        touches_org = any(p.startswith(_ORG_PREFIX) for p in touched)
        found: list[Violation] = []
        landed: list[str] = []
        for mark in self._relevant(touched, ours, mode == "reorganize" and touches_org, change):
            if mark.commit.run == run_id:
                continue
            path, short = mark.path, mark.commit.sha[:12]
            landed.append(path)
            if path in touched:
                found.append(Violation(path, "collision", f"changed on main by {short}"))
            elif mode == "reorganize" and touches_org and path.startswith(_ORG_PREFIX):
                # Impossible under the reorganization lease; checked anyway.
                found.append(
                    Violation(path, "collision", f"organization/ changed on main by {short}")
                )
            name = parse_record_path(path) if path.startswith(_RECORDS_PREFIX) else None
            if name is not None and name.note_id in ours and path != ours[name.note_id]:
                found.append(
                    Violation(
                        ours[name.note_id],
                        "duplicate-id",
                        f"id {name.note_id} landed on main as {path}",
                    )
                )
        # A name that differs from ours only in case or Unicode form may have landed meanwhile.
        if landed:
            found.extend(landed_name_clashes(head_tree(), landed, change))
        return found

    def _relevant(
        self, touched: set[str], ours: dict[str, str], organization: bool, change: Change
    ) -> list[_Mark]:
        """The landed paths that could clash with the change (any that can is among them),
        newest commit first, in each commit's path order."""
        marks: dict[tuple[int, int], _Mark] = {}
        for path in touched:
            marks.update((m.order, m) for m in self._by_path.get(path, ()))
        for note_id in ours:
            marks.update((m.order, m) for m in self._by_note_id.get(note_id, ()))
        if organization:
            marks.update((m.order, m) for m in self._organization)
        for path in change.written:
            directory = ""
            for segment in path.split("/"):
                forms = self._by_form.get((directory, normalize_segment(segment)), {})
                for name, found in forms.items():
                    if name != segment:  # the same name is no clash
                        marks.update((m.order, m) for m in found)
                directory = f"{directory}/{segment}" if directory else segment
        return [marks[order] for order in sorted(marks)]


def recheck_since(
    repo: pygit2.Repository,
    base: str,
    head: str,
    change: Change,
    namespace: str,
    mode: Mode,
    run_id: str,
) -> list[Violation]:
    """``LandedSince.clashes`` for one change, reading what landed from the repository."""
    if head == base:
        return []
    since = LandedSince.read(repo, base, head)
    return since.clashes(lambda: repo[head].peel(pygit2.Tree), change, namespace, mode, run_id)


def recheck(
    repo: pygit2.Repository, base: str, change: Change, namespace: str, mode: Mode, run_id: str
) -> list[Violation]:
    """What landed on main since ``base`` that ``change`` now clashes with (reads only)."""
    return recheck_since(repo, base, main_commit(repo), change, namespace, mode, run_id)
