"""``impyard knowledge purge``: a leak removed from everywhere Impyard put a copy.

One function does the purge and its preview (``dry_run``): the same selection, the same
history walk, the same file sweep, so the preview's counts are the purge's. In order,
each step safe to repeat (a host that dies mid-purge leaves a purge that, run again,
finishes; nothing before the refs move changes what any reader sees):

1. every commit of every ref rewritten without the purged files (``rewrite``), new
   objects unsynced: they reach the disk durably in step 2;
2. one durable pack of everything the new refs reach (``compact.pack``);
3. the refs moved (compare-and-swap against what was read), a run purge's own candidate
   and quarantine refs deleted;
4. every other object deleted, reflogs with them (``compact.drop_all_but``);
5. the published origin rebuilt from the new main; the imp's checkout layers, its
   checked-tree cache and the kept checkouts whose refs changed dropped;
6. the data root's files swept (``datafiles``): a text purge's string redacted or its
   copies deleted; a run purge's logs and receipts, a source purge's receipts and
   archived bodies, removed;
7. every backup remote (``remotes``).

It runs with no serve on the data root and no unfinished run of the imp, under the
imp's lane lock; a preview reads only, and runs beside serve and runs. The journal
records it (``knowledge.purged``) without the purged text.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pygit2

from impyard.common.errors import ImpyardError
from impyard.common.fsutil import locked
from impyard.home import Home
from impyard.journal.log import Journal
from impyard.knowledge.imps import open_repo, require_imp
from impyard.purge import compact, datafiles, runfiles
from impyard.purge.remotes import RemotePurge, purge_remotes
from impyard.purge.rewrite import Rewrite, rewrite
from impyard.purge.selector import Matcher, Selector, commit_refs, run_refs
from impyard.runs.records import manifest as manifests

#: The most paths a report lists (the counts are whole).
MAX_LISTED = 200


@dataclass
class PurgeReport:
    imp: str
    selector: Selector
    dry_run: bool
    commits: int = 0
    blobs: int = 0
    paths: list[str] = field(default_factory=list)
    not_cleared: list[str] = field(default_factory=list)
    messages: int = 0
    refs: list[str] = field(default_factory=list)
    deleted_refs: list[str] = field(default_factory=list)
    kept_checkouts: list[str] = field(default_factory=list)
    layers: int = 0
    files: list[datafiles.FileAction] = field(default_factory=list)
    remotes: list[RemotePurge] = field(default_factory=list)
    #: Object store files deleted by the compaction (not known before it: no preview).
    pruned: int = 0

    def counts(self) -> dict[str, int]:
        """What the preview promises and the purge does, number for number."""
        return {
            "commits": self.commits,
            "files": self.blobs,
            "paths": len(self.paths),
            "not_cleared": len(self.not_cleared),
            "messages": self.messages,
            "refs": len(self.refs),
            "deleted_refs": len(self.deleted_refs),
            "kept_checkouts": len(self.kept_checkouts),
            "layers": self.layers,
            "data_files": len(self.files),
        }

    @property
    def complete(self) -> bool:
        """Nothing left anywhere: no file left holding it, every remote reached."""
        left = any(f.action == "left" for f in self.files)
        return not left and all(r.error is None for r in self.remotes)

    def as_dict(self) -> dict[str, Any]:
        return {
            "imp": self.imp,
            "selector": self.selector.shown,
            "dry_run": self.dry_run,
            "counts": self.counts(),
            "paths": self.paths[:MAX_LISTED],
            "not_cleared": self.not_cleared[:MAX_LISTED],
            "refs": self.refs,
            "deleted_refs": self.deleted_refs,
            "kept_checkouts": self.kept_checkouts,
            "files": [f.__dict__ for f in self.files],
            "remotes": [r.as_dict() for r in self.remotes],
            "pruned": self.pruned,
            "complete": self.complete,
        }


def purge(home: Home, imp: str, selector: Selector, *, dry_run: bool = False) -> PurgeReport:
    """Purge (or preview) what ``selector`` names from imp ``imp`` everywhere."""
    require_imp(home, imp)
    with _quiet_data_root(home, imp, dry_run), _lane(home, imp, dry_run):
        repo = open_repo(home, imp)
        before = commit_refs(repo)
        with _unsynced(not dry_run):
            found = rewrite(repo, Matcher(repo, selector), write=not dry_run)
        doomed = run_refs(repo, selector.value) if selector.kind == "run" else []
        report = _report(imp, selector, dry_run, found, doomed)
        moves: dict[str, tuple[pygit2.Oid, pygit2.Oid | None]] = dict(found.refs)
        moves.update({name: (before[name], None) for name in doomed})
        spaces = runfiles.kept_checkouts(home, imp, moves)
        report.kept_checkouts = [m.run_id for m in spaces]
        report.layers = runfiles.layer_count(home, imp)
        skip = runfiles.not_swept(home, imp, spaces)
        if not dry_run:
            after = {name: oid for name, oid in before.items() if name not in doomed}
            after.update({name: new for name, (_, new) in found.refs.items()})
            report.pruned = _move_and_compact(repo, before, after, doomed)
            runfiles.republish(home, imp)
            runfiles.drop_derived(home, imp, spaces)
        if selector.kind == "text":
            report.files = datafiles.sweep(home, selector.value, skip, write=not dry_run)
        else:
            report.files = runfiles.selected_files(home, imp, selector, write=not dry_run)
        report.remotes = purge_remotes(home, imp, open_repo(home, imp), moves, write=not dry_run)
    if not dry_run:
        Journal(home.journal).record(
            "knowledge.purged",
            imp=imp,
            selector=selector.shown,
            complete=report.complete,
            **report.counts(),
        )
    return report


def _report(
    imp: str, selector: Selector, dry_run: bool, found: Rewrite, doomed: list[str]
) -> PurgeReport:
    return PurgeReport(
        imp,
        selector,
        dry_run,
        commits=len(found.changed),
        blobs=len(found.blobs),
        paths=sorted(found.paths),
        not_cleared=sorted(found.not_cleared - found.paths),
        messages=found.messages,
        refs=sorted(found.refs),
        deleted_refs=doomed,
    )


def _move_and_compact(
    repo: pygit2.Repository,
    before: dict[str, pygit2.Oid],
    after: dict[str, pygit2.Oid],
    doomed: list[str],
) -> int:
    """Steps 2 to 4: the new history durable, the refs moved, everything else gone."""
    name, _ = compact.pack(repo, after.values())
    for ref, target in after.items():
        if target == before[ref]:
            continue
        current = repo.references[ref].target
        if current != before[ref]:  # the lane lock keeps the lane out; anything else is news
            raise ImpyardError(f"{ref} moved during the purge (to {current}): run it again")
        repo.references[ref].set_target(target, "impyard knowledge purge")
    for ref in doomed:
        repo.references.delete(ref)
    git_dir = Path(repo.path)
    repo.free()
    return compact.drop_all_but(git_dir, name)


@contextlib.contextmanager
def _lane(home: Home, imp: str, dry_run: bool) -> Iterator[None]:
    """The imp's lane lock for a purge; a preview only reads, and holds nothing."""
    if dry_run:
        yield
        return
    with locked(home.lane_lock(imp)):
        yield


@contextlib.contextmanager
def _quiet_data_root(home: Home, imp: str, dry_run: bool) -> Iterator[None]:
    """No serve may run (its runs, pools and console read the repository being
    rewritten), and no run of the imp may be unfinished (its base is about to go). A
    preview reads only: it runs beside them."""
    from impyard.serve.record import ServeRunningError, sole_serve

    if dry_run:
        yield
        return

    unfinished = [m.run_id for m in manifests.each(home, imp) if not m.is_terminal]
    if unfinished:
        raise ImpyardError(
            f"run {unfinished[0]} of imp {imp!r} has not finished (it is running, or a dead "
            "host left it and `impyard serve` recovers it): purge after it ends"
        )
    try:
        with sole_serve(home):
            yield
    except ServeRunningError as exc:
        raise ImpyardError(
            f"an impyard serve (pid {exc.pid}) runs on this data root: stop it first; a "
            "purge rewrites the repository its runs, pools and console read"
        ) from None


@contextlib.contextmanager
def _unsynced(enabled: bool) -> Iterator[None]:
    """Rewritten objects unsynced one by one: the pack that follows makes them durable
    together, before any ref names them."""
    if not enabled:
        yield
        return
    pygit2.settings.enable_fsync_gitdir(False)
    try:
        yield
    finally:
        pygit2.settings.enable_fsync_gitdir(True)
