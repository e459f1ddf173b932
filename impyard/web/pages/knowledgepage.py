"""The knowledge pages: each imp's main (its tree, its first-parent history with commit
trailers as fields) and one note with its frontmatter and provenance, read from the
canonical repository with pygit2. Provenance and the count of independent sources come
from ``knowledge.provenance``, as ``impyard knowledge provenance`` shows them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import pygit2

from impyard.common.errors import NotFoundError
from impyard.common.textsafe import escape_text
from impyard.home import Home
from impyard.knowledge.imps import list_imps, open_repo
from impyard.knowledge.store.gitobj import lookup_entry
from impyard.knowledge.store.repo import main_commit
from impyard.knowledge.validation.provenance import note_provenance
from impyard.knowledge.validation.records import RECORDS, parse_frontmatter
from impyard.runs.checkpoints.landing import run_receipts
from impyard.status.knowledge import imp_knowledge
from impyard.status.model import ImpKnowledge
from impyard.web.pages import commitview

#: First-parent commits of main a page lists.
HISTORY = 30
#: Entries of one directory a page lists.
TREE_ENTRIES = 500
#: Bytes of a note a page shows.
NOTE_BYTES = 256 * 1024


def imps(home: Home) -> list[ImpKnowledge]:
    return [imp_knowledge(home, imp) for imp in list_imps(home)]


@dataclass(frozen=True)
class Entry:
    name: str
    path: str
    directory: bool
    size: int | None


@dataclass(frozen=True)
class CommitView:
    sha: str
    summary: str
    author: str
    when: int
    trailers: dict[str, str]


@dataclass(frozen=True)
class TreeView:
    imp: str
    main: str
    path: str
    entries: list[Entry]
    more: int
    history: list[CommitView]


def tree(home: Home, imp: str, path: str = "") -> TreeView:
    repo = open_repo(home, imp)
    main = main_commit(repo)
    head = cast(pygit2.Commit, repo[main])
    node = head.tree if not path else lookup_entry(head.tree, path)
    if not isinstance(node, pygit2.Tree):
        raise NotFoundError(f"imp {imp!r}: no directory {path!r} on main")
    entries: list[Entry] = []
    for obj in node:
        name = obj.name or ""
        full = f"{path}/{name}" if path else name
        is_dir = isinstance(obj, pygit2.Tree)
        size = obj.size if isinstance(obj, pygit2.Blob) else None
        entries.append(Entry(name, full, is_dir, size))
    entries.sort(key=lambda e: (not e.directory, e.name))
    return TreeView(
        imp,
        main,
        path,
        entries[:TREE_ENTRIES],
        max(0, len(entries) - TREE_ENTRIES),
        history(repo, head) if not path else [],
    )


def history(repo: pygit2.Repository, head: pygit2.Commit, limit: int = HISTORY) -> list[CommitView]:
    found: list[CommitView] = []
    current: pygit2.Commit | None = head
    while current is not None and len(found) < limit:
        found.append(
            CommitView(
                sha=str(current.id),
                summary=commitview.summary(current),
                author=commitview.author(current),
                when=current.commit_time,
                trailers=commitview.trailers(current),
            )
        )
        current = current.parents[0] if current.parents else None
    return found


@dataclass(frozen=True)
class NoteView:
    imp: str
    path: str
    text: str
    cut: bool
    fields: dict[str, Any]
    problems: list[str]
    provenance: dict[str, Any]
    independent_sources: int


def is_record(path: str) -> bool:
    """A note of ``records/``: every file there but the host's ``records/README.md``."""
    return path.startswith(f"{RECORDS}/") and path != f"{RECORDS}/README.md"


def note(home: Home, imp: str, path: str) -> NoteView:
    found = note_provenance(home, imp, path)  # NotFoundError for no such file
    repo = open_repo(home, imp)
    blob = lookup_entry(cast(pygit2.Commit, repo[main_commit(repo)]).tree, path)
    assert isinstance(blob, pygit2.Blob), "note_provenance found a file there"
    data = blob.data
    text = data[:NOTE_BYTES].decode("utf-8", errors="replace")
    # Only a record has a frontmatter to check: the repository's README.md files (and
    # anything else outside records/) are prose, and a warning there would be false.
    frontmatter = parse_frontmatter(text) if is_record(path) else None
    logged = run_receipts(home, found.run) if found.run else {}
    return NoteView(
        imp=imp,
        path=path,
        text=escape_text(text),
        cut=len(data) > NOTE_BYTES,
        fields=dict(frontmatter.fields) if frontmatter else {},
        problems=list(frontmatter.errors) if frontmatter else [],
        provenance={
            "commit": found.commit,
            "run": found.run,
            "source_urls": found.source_urls,
            "uncited": found.uncited,
            "receipts": found.receipts(logged),
        },
        independent_sources=found.independent_sources,
    )
