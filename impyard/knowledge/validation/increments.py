"""A run that checkpoints more than once: what its earlier checkpoints landed, and what is
new in its change since.

A snapshot always describes the whole change against the run's base. Files an
earlier checkpoint of the run landed are immutable for the rest of the run: an
unchanged one is not integrated again, and a changed, deleted or replaced one is
kept back with a ``checkpointed`` violation while the rest of the change proceeds.
What is kept back is kept as the box left it: the candidate of such a run holds the
box's final tree (``Split.kept``), in which a deleted file is simply absent, so the
candidate also names those paths (``gone``).
What landed is read from the checkpoint commits themselves (their diff against
their first parent), never from anything the box could have written.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import pygit2

from impyard.knowledge.change import RULES, Change, FileState, Violation
from impyard.knowledge.store.gitobj import changed_paths, commit_at, lookup_entry

_EXECUTABLE = pygit2.enums.FileMode.BLOB_EXECUTABLE


@dataclass(frozen=True)
class LandedFile:
    """A file as an earlier checkpoint of the run left it on main."""

    blob: str
    size: int
    executable: bool

    def same_as(self, state: FileState) -> bool:
        return (self.blob, self.executable) == (state.blob, state.executable)


#: path -> the file a checkpoint landed there, or None where a checkpoint deleted it.
Landed = Mapping[str, LandedFile | None]


def landed_by(repo: pygit2.Repository, commits: Iterable[str]) -> dict[str, LandedFile | None]:
    """What the checkpoint ``commits`` (oldest first) landed; O(their changes)."""
    landed: dict[str, LandedFile | None] = {}
    for sha in commits:
        commit = commit_at(repo, sha)
        parent = commit.parents[0].tree if commit.parents else None
        for path in changed_paths(parent, commit.tree):
            entry = lookup_entry(commit.tree, path)
            if isinstance(entry, pygit2.Blob):
                mode = commit.tree[path].filemode
                landed[path] = LandedFile(str(entry.id), entry.size, mode == _EXECUTABLE)
            else:
                landed[path] = None
    return landed


@dataclass
class Split:
    """A whole-run change, seen against what the run already landed."""

    #: The run's total contribution if every checkpointed file is left as it landed:
    #: what validation judges.
    effective: Change
    #: What is new since the last checkpoint: what the lane integrates now.
    increment: Change
    #: The change as given: the box's final tree against the run's base.
    whole: Change
    #: Changes to checkpointed files, refused with the rest going on.
    touched: list[Violation] = field(default_factory=list)
    #: The refused versions of checkpointed files that are still regular files.
    kept_back: dict[str, FileState] = field(default_factory=dict)
    #: Checkpointed files the box's final tree has no regular file for (deleted, or
    #: replaced by something the snapshot refused).
    gone: set[str] = field(default_factory=set)

    @property
    def kept(self) -> Change:
        """What a candidate keeps when main does not take all of the change: with a
        checkpointed file touched, the box's final tree (whatever landed included, so a
        deletion is there as the file's absence, named in ``gone``); else the rest."""
        if self.touched:
            return self.whole
        return self.rest

    @property
    def rest(self) -> Change:
        """Everything of the change that has not landed (a candidate or quarantine keeps it)."""
        written = dict(self.increment.written)
        written.update(self.kept_back)
        return Change(
            written,
            set(self.increment.deleted),
            list(self.effective.problems),
            self.effective.unstored,
        )


def split(change: Change, landed: Landed) -> Split:
    """Separate the new part of ``change`` from what earlier checkpoints landed."""
    if not landed:
        return Split(effective=change, increment=change, whole=change)
    written = dict(change.written)
    deleted = set(change.deleted)
    problems = [p for p in change.problems if p.path not in landed]
    touched: list[Violation] = []
    kept_back: dict[str, FileState] = {}
    gone: set[str] = set()
    for problem in change.problems:
        if problem.path in landed:
            detail = f"replaced by something unreadable ({problem.rule})"
            touched.append(_touched(problem.path, detail))
    for path, was in sorted(landed.items()):
        now = written.get(path)
        if was is None:  # a checkpoint deleted it; it must stay deleted
            if now is not None:
                touched.append(_touched(path, "re-created after a checkpoint deleted it"))
                kept_back[path] = written.pop(path)
            deleted.add(path)
            continue
        if now is not None and was.same_as(now):
            continue
        if now is not None:
            touched.append(_touched(path, "changed after a checkpoint landed it"))
            kept_back[path] = now
        else:
            gone.add(path)
            if not any(v.path == path for v in touched):
                touched.append(_touched(path, "deleted after a checkpoint landed it"))
        deleted.discard(path)
        written[path] = FileState(was.blob, was.size, was.executable)
    effective = Change(written, deleted, problems, change.unstored)
    increment = Change(
        {
            path: state
            for path, state in written.items()
            if not ((was := landed.get(path)) is not None and was.same_as(state))
        },
        {path for path in deleted if not (path in landed and landed[path] is None)},
        problems,
        change.unstored,
    )
    return Split(effective, increment, change, touched, kept_back, gone)


def _touched(path: str, detail: str) -> Violation:
    return Violation(path, "checkpointed", f"{RULES['checkpointed']}: {detail}")


__all__ = ["Landed", "LandedFile", "Split", "landed_by", "split"]
