"""The run page's facts: the manifest, the box's output so far, the run's journal events
(its gateway requests among them), its fetch receipts and what it landed, as a diff.

Everything box-written is returned as text for the template to escape; the box output
goes through ``escape_text``/``StreamEscaper`` first, so no terminal control reaches it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, cast

import pygit2

from impyard.box.watch.livelog import LogReader
from impyard.common.errors import ImpyardError
from impyard.common.textsafe import StreamEscaper
from impyard.gateway.provenance.receipts import Receipt
from impyard.home import Home
from impyard.journal.query import JournalQuery
from impyard.journal.tail import JournalTail
from impyard.knowledge.imps import open_repo
from impyard.runs.checkpoints.landing import run_receipts
from impyard.runs.records import manifest as manifests
from impyard.runs.records.model import Manifest
from impyard.web.pages import commitview

#: Box output a page shows before saying the rest is in ``runs logs``.
PAGE_LOG_BYTES = 512 * 1024
#: Newest journal events of the run a page shows.
JOURNAL_EVENTS = 300
#: Characters of the landed diff a page shows.
DIFF_CHARS = 200_000
GATEWAY_EVENT = "gateway.request"


@dataclass(frozen=True)
class BoxText:
    text: str
    #: More output was there than the page shows.
    cut: bool


@dataclass(frozen=True)
class Landed:
    commit: str
    message: str
    trailers: dict[str, str]
    patch: str
    cut: bool


@dataclass(frozen=True)
class RunPage:
    manifest: Manifest
    output: BoxText
    events: list[dict[str, Any]]
    requests: list[dict[str, Any]]
    receipts: list[Receipt]
    landed: Landed | None
    landed_error: str | None
    #: The knowledge limits the run was admitted under, by name (empty for an older run).
    limits: dict[str, int]


def run_page(home: Home, run_id: str) -> RunPage:
    m = manifests.read(home, run_id)
    with JournalTail(home.journal) as tail:
        events = list(tail.history(JournalQuery(run=run_id), last=JOURNAL_EVENTS))
    landed, error = None, None
    if m.produced_commit:
        try:
            landed = landed_diff(home, m.imp, m.produced_commit)
        except (ImpyardError, pygit2.GitError, KeyError, ValueError) as exc:
            error = f"cannot read {m.produced_commit}: {exc}"
    return RunPage(
        manifest=m,
        output=box_text(home, run_id),
        events=[e for e in events if e.get("event") != GATEWAY_EVENT],
        requests=[e for e in events if e.get("event") == GATEWAY_EVENT],
        receipts=list(run_receipts(home, run_id).values()),
        landed=landed,
        landed_error=error,
        limits=asdict(m.limits) if m.limits is not None else {},
    )


def box_text(home: Home, run_id: str, limit: int = PAGE_LOG_BYTES) -> BoxText:
    """The box's output as far as it is written now, from its first byte, escaped; at most
    ``limit`` bytes of it (the live view on the page streams all of it)."""
    reader = LogReader(home.box_log(run_id))
    escaper = StreamEscaper()
    pieces: list[str] = []
    read = 0
    chunks = reader.read() or (list(reader.read_whole()) if reader.legacy() else [])
    while chunks and read < limit:
        for chunk in chunks:
            chunk = chunk[: limit - read]
            pieces.append(escaper.feed(chunk))
            read += len(chunk)
        chunks = reader.read() if read < limit else []
    pieces.append(escaper.flush())
    return BoxText("".join(pieces), cut=read >= limit)


def landed_diff(home: Home, imp: str, sha: str) -> Landed:
    repo = open_repo(home, imp)
    commit = cast(pygit2.Commit, repo[sha])
    patch = ""
    if commit.parents:
        patch = commit.parents[0].tree.diff_to_tree(commit.tree).patch or ""
    return Landed(
        commit=sha,
        message=commitview.first_paragraph(commit),
        trailers=commitview.trailers(commit),
        patch=patch[:DIFF_CHARS],
        cut=len(patch) > DIFF_CHARS,
    )
