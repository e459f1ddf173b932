"""Where a note on main came from: its sources as it states them, the lane commit that
landed it, that commit's run, and the fetch receipts the commit records for the note.

Everything here is read from the canonical repository (never a checkout); the
receipts' own details (status, size, time) live in the run's directory and are
the caller's to add.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urlsplit

import pygit2

from impyard.common.errors import NotFoundError
from impyard.home import Home
from impyard.knowledge.imps import open_repo
from impyard.knowledge.store.gitobj import lookup_entry
from impyard.knowledge.store.repo import main_commit
from impyard.knowledge.validation.citations import Citation, parse_trailers
from impyard.knowledge.validation.records import parse_frontmatter

if TYPE_CHECKING:
    from impyard.gateway.provenance.receipts import Receipt


@dataclass(frozen=True)
class NoteProvenance:
    path: str
    source_urls: list[str]
    source_receipts: list[str]
    #: The cited receipts the note marks as partial sources (fetches cut short).
    partial_receipts: list[str]
    #: The first-parent commit of main that added the path or last changed it.
    commit: str
    #: Its ``Impyard-Run`` trailer (None for a commit the lane did not make).
    run: str | None
    #: Its ``Source-Receipt`` trailers for the receipts this note cites.
    citations: list[Citation]

    @property
    def independent_sources(self) -> int:
        """What the note's trust rests on: the distinct hosts among the receipts the lane
        verified for it (its ``Source-Receipt`` trailers), fetches cut short left out.
        Zero reads "no fetched source"."""
        hosts = {_host(c.url) for c in self.citations if not c.partial}
        return len(hosts - {None})

    @property
    def uncited(self) -> list[str]:
        """The receipts the note names that its commit has no ``Source-Receipt`` trailer
        for."""
        trailered = {c.receipt for c in self.citations}
        return [r for r in self.source_receipts if r not in trailered]

    def receipts(self, logged: Mapping[str, Receipt]) -> list[dict[str, Any]]:
        """Each cited receipt as its commit records it, with what the run's receipt log
        (``logged``, by id) says of the fetch: all None when the log no longer has it."""
        rows = []
        for citation in self.citations:
            fetched = logged.get(citation.receipt)
            rows.append(
                {
                    **citation.as_dict(),
                    "logged": fetched is not None,
                    "status": fetched.status if fetched else None,
                    "bytes": fetched.bytes if fetched else None,
                    "content_type": fetched.content_type if fetched else None,
                    "started_at": fetched.started_at if fetched else None,
                    "ended_at": fetched.ended_at if fetched else None,
                }
            )
        return rows


def note_provenance(home: Home, imp: str, path: str) -> NoteProvenance:
    """The provenance of the file at ``path`` on the imp's main; NotFoundError when the imp
    or the file does not exist."""
    repo = open_repo(home, imp)
    head = cast(pygit2.Commit, repo[main_commit(repo)])
    entry = lookup_entry(head.tree, path)
    if entry is None:
        raise NotFoundError(f"imp {imp!r}: no file {path!r} on main")
    if not isinstance(entry, pygit2.Blob):
        raise NotFoundError(f"imp {imp!r}: {path!r} on main is a directory, not a note")
    urls, receipts, partial = _sources(entry.data)
    commit = _last_change(head, path, entry)
    cited = set(receipts)
    return NoteProvenance(
        path=path,
        source_urls=urls,
        source_receipts=receipts,
        partial_receipts=partial,
        commit=str(commit.id),
        run=commit.message_trailers.get("Impyard-Run"),
        citations=[c for c in parse_trailers(commit.message) if c.receipt in cited],
    )


def _sources(data: bytes) -> tuple[list[str], list[str], list[str]]:
    """The note's source_urls, source_receipts and partial_receipts (empty where it states
    none)."""
    fields = parse_frontmatter(data.decode("utf-8", errors="replace")).fields
    listed = (fields.get(key) for key in ("source_urls", "source_receipts", "partial_receipts"))
    urls, receipts, partial = (value if isinstance(value, list) else [] for value in listed)
    return urls, receipts, partial


def _last_change(head: pygit2.Commit, path: str, entry: pygit2.Object) -> pygit2.Commit:
    """The newest first-parent commit whose version of ``path`` (``entry`` at ``head``)
    differs from its parent's."""
    current = head
    while current.parents:
        parent = current.parents[0]
        before = lookup_entry(parent.tree, path)
        if before is None or _key(before) != _key(entry):
            return current
        current = parent
    return current


def _host(url: str) -> str | None:
    try:
        return urlsplit(url).hostname
    except ValueError:
        return None


def _key(entry: pygit2.Object) -> tuple[pygit2.Oid, int]:
    return entry.id, int(entry.filemode)


__all__ = ["NoteProvenance", "note_provenance"]
