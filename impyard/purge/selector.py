"""What a purge removes: the files one run wrote, the records that cite a source, the
paths a glob matches, or every file that holds a string; decided per blob, once.

A verdict is ``purge`` (the file goes from every commit that holds it), ``keep``, or
``not-cleared``: a record citing the purged source that also rests on others stays,
and is named, so an owner decides what to do with it. The string (``text``) is also
looked for in tree entry names (a directory or file named by it goes whole) and in
commit messages (replaced by ``[purged]``).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import pygit2

from impyard.common.errors import UsageError
from impyard.common.names import check_run_id
from impyard.knowledge.store.refnames import candidate_ref, quarantine_ref
from impyard.knowledge.validation.frontmatter import parse_frontmatter

Kind = Literal["run", "source", "path", "text"]
Verdict = Literal["purge", "keep", "not-cleared"]
KINDS: tuple[Kind, ...] = ("run", "source", "path", "text")
#: What a purged string becomes where it is replaced, not removed (messages, text files).
REDACTED = b"[purged]"
#: The shortest string a text purge looks for: a shorter one would match everywhere.
MIN_TEXT_CHARS = 4
_RUN_TRAILER = "Impyard-Run"


@dataclass(frozen=True)
class Selector:
    kind: Kind
    value: str

    def __post_init__(self) -> None:
        if self.kind == "run":
            check_run_id(self.value)
        elif self.kind == "text" and len(self.value) < MIN_TEXT_CHARS:
            raise UsageError(f"--text needs at least {MIN_TEXT_CHARS} characters")
        elif not self.value.strip():
            raise UsageError(f"--{self.kind} is empty")

    @property
    def shown(self) -> str:
        """The selector as the journal and a report say it: never the purged text."""
        if self.kind == "text":
            return f"text ({len(self.value)} characters)"
        return f"{self.kind} {self.value}"

    @property
    def needle(self) -> bytes | None:
        """The bytes looked for in files and objects (a text purge only)."""
        return self.value.encode() if self.kind == "text" else None


class Matcher:
    """One selector against one repository: verdicts memoized by blob (and by path, for
    a glob, whose verdict depends on where the blob is)."""

    def __init__(self, repo: pygit2.Repository, selector: Selector) -> None:
        self.repo = repo
        self.selector = selector
        self.path_dependent = selector.kind == "path"
        self._verdicts: dict[tuple[pygit2.Oid, str], Verdict] = {}
        self.run_blobs = _run_blobs(repo, selector.value) if selector.kind == "run" else set()
        self._decide: Callable[[str, pygit2.Oid], Verdict] = getattr(self, f"_{selector.kind}")

    def blob(self, path: str, oid: pygit2.Oid) -> Verdict:
        key = (oid, path if self.path_dependent else "")
        found = self._verdicts.get(key)
        if found is None:
            found = self._verdicts[key] = self._decide(path, oid)
        return found

    def drops_name(self, name: str) -> bool:
        """Whether a tree entry goes whole for its name (a text purge's string in it)."""
        needle = self.selector.needle
        return needle is not None and needle in name.encode("utf-8", "surrogateescape")

    def message(self, raw: bytes) -> bytes:
        needle = self.selector.needle
        return raw.replace(needle, REDACTED) if needle else raw

    def _text(self, path: str, oid: pygit2.Oid) -> Verdict:
        needle = self.selector.needle
        assert needle is not None
        return "purge" if needle in self.repo[oid].read_raw() else "keep"

    def _path(self, path: str, oid: pygit2.Oid) -> Verdict:
        return "purge" if fnmatch.fnmatchcase(path, self.selector.value) else "keep"

    def _run(self, path: str, oid: pygit2.Oid) -> Verdict:
        return "purge" if oid in self.run_blobs else "keep"

    def _source(self, path: str, oid: pygit2.Oid) -> Verdict:
        if not path.endswith(".md"):
            return "keep"
        text = self.repo[oid].read_raw().decode("utf-8", "replace")
        urls = parse_frontmatter(text).fields.get("source_urls")
        cited = [urls] if isinstance(urls, str) else list(urls or [])
        if self.selector.value not in cited:
            return "keep"
        return "purge" if set(cited) == {self.selector.value} else "not-cleared"


def run_refs(repo: pygit2.Repository, run_id: str) -> list[str]:
    """The run's candidate and quarantine refs: a run purge deletes them whole."""
    names = (candidate_ref(run_id), quarantine_ref(run_id))
    return [name for name in names if name in repo.references]


def _run_blobs(repo: pygit2.Repository, run_id: str) -> set[pygit2.Oid]:
    """Every blob the run's commits wrote: its lane commits on any ref (by their
    ``Impyard-Run`` trailer) and its candidate and quarantine commits, each against its
    first parent."""
    own = {repo.references[name].peel(pygit2.Commit).id for name in run_refs(repo, run_id)}
    found: set[pygit2.Oid] = set()
    for commit in all_commits(repo):
        if commit.id in own or commit.message_trailers.get(_RUN_TRAILER) == run_id:
            found |= _written(commit)
    return found


def commit_refs(repo: pygit2.Repository) -> dict[str, pygit2.Oid]:
    """Every direct ref that names a commit, and the commit (a purge rewrites them all)."""
    found: dict[str, pygit2.Oid] = {}
    for name in repo.references:
        reference = repo.references[name]
        if reference.type != pygit2.enums.ReferenceType.DIRECT:
            continue  # symbolic (HEAD): it follows what it names
        try:
            found[name] = reference.peel(pygit2.Commit).id
        except (pygit2.GitError, KeyError, ValueError, pygit2.InvalidSpecError):
            continue
    return found


def all_commits(repo: pygit2.Repository) -> list[pygit2.Commit]:
    """Every commit reachable from a ref, parents before children."""
    tips = list(dict.fromkeys(commit_refs(repo).values()))
    if not tips:
        return []
    order = pygit2.enums.SortMode.TOPOLOGICAL | pygit2.enums.SortMode.REVERSE
    walker = repo.walk(tips[0], order)
    for tip in tips[1:]:
        walker.push(tip)
    return list(walker)


def _written(commit: pygit2.Commit) -> set[pygit2.Oid]:
    if commit.parents:
        diff = commit.parents[0].tree.diff_to_tree(commit.tree)
    else:
        diff = commit.tree.diff_to_tree(swap=True)
    deleted = pygit2.enums.DeltaStatus.DELETED
    return {delta.new_file.id for delta in diff.deltas if delta.status != deleted}
