"""What Impyard preserved off main, read back for its owner: candidate refs (changes the
lane refused) and quarantine refs (what a box left after an abnormal exit).

A preserved commit is the run's base plus the storable part of its change (see
``knowledge.quarantine.preserved_commit``), so the change is the commit's tree against
its first parent: files written (blob and mode) and paths deleted. Everything here is
read from Git objects the host wrote, never from a box's files.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

import pygit2

from impyard.common.errors import NotFoundError
from impyard.common.names import RUN_ID, check_run_id
from impyard.common.textcap import cut_lines
from impyard.home import Home
from impyard.knowledge.change import Change, FileState, Violation
from impyard.knowledge.checkouts.treefs import is_blob, is_executable
from impyard.knowledge.imps import list_imps, open_repo
from impyard.knowledge.integration.quarantine import deleted_by_trailers, not_kept_lines
from impyard.knowledge.store.gitobj import changed_paths, commit_at, lookup_entry
from impyard.knowledge.store.refnames import candidate_ref, quarantine_ref
from impyard.runs.records import manifest as manifests
from impyard.runs.records.lookup import LAST, STAMP_CHARS, resolve_run
from impyard.runs.records.model import Manifest

Kind = Literal["candidate", "quarantine"]

#: A preserved commit's message as read back: each line, and the whole. The lane writes
#: at most ``violations.KEPT`` reasons and as many files not kept, a line each; a ref a
#: restore brought in may hold any message the gate let through.
MESSAGE_LINE_CHARS = 10_000
MESSAGE_CHARS = 1024 * 1024

PREFIXES: dict[Kind, str] = {"candidate": "refs/candidates/", "quarantine": "refs/quarantine/"}
#: The CLI command group of each kind.
COMMANDS: dict[Kind, str] = {"candidate": "candidates", "quarantine": "quarantine"}


def ref_of(kind: Kind, run_id: str) -> str:
    return candidate_ref(run_id) if kind == "candidate" else quarantine_ref(run_id)


@dataclass(frozen=True)
class Preserved:
    """One preserved change: where it is, and the run it came from (when its manifest is
    still there)."""

    kind: Kind
    run_id: str
    imp: str
    ref: str
    commit: str
    base: str
    created_at: str
    #: The commit message without its trailers: the summary, the reasons, what was not stored.
    message: str
    manifest: Manifest | None

    @property
    def summary(self) -> str:
        return self.message.splitlines()[0] if self.message else ""

    @property
    def reason(self) -> str:
        """Why it is off main in a line: the run's reason, else its first violation, else
        the commit's summary."""
        if self.manifest is not None and self.manifest.reason:
            return self.manifest.reason
        if self.kind == "candidate" and self.violations:
            first = self.violations[0]
            more = self.violations_total - 1
            return f"{first.rule}: {first.path}" + (f" (and {more} more)" if more else "")
        return self.summary

    @property
    def not_kept(self) -> list[str]:
        """What the run wrote that this commit does not hold, a line each with its reason."""
        return not_kept_lines(self.message)

    @property
    def violations(self) -> list[Violation]:
        """What the run's manifest recorded: the lane's reasons for a candidate, the entries
        the snapshot refused for a quarantine (the first ``KEPT`` of them)."""
        return list(self.manifest.validation_errors) if self.manifest is not None else []

    @property
    def violations_total(self) -> int:
        m = self.manifest
        if m is None:
            return 0
        return m.validation_errors_total or len(m.validation_errors)

    def change(self, repo: pygit2.Repository) -> Change:
        return tree_change(repo, self.commit)


def list_preserved(home: Home, kind: Kind, imp: str | None = None) -> list[Preserved]:
    """Every preserved change of ``kind``, across imps (or one), newest run first (run ids
    sort by their start time): what an owner reviews next is what just happened."""
    found: list[Preserved] = []
    for name in [imp] if imp is not None else list_imps(home):
        repo = open_repo(home, name)
        for ref, run_id in _refs(repo, kind):
            found.append(_read(home, repo, name, kind, ref, run_id))
    return sorted(found, key=lambda p: (p.run_id, p.imp), reverse=True)


def preserved_run(home: Home, text: str, kind: Kind) -> str:
    """The run id ``text`` names (an id, a unique prefix, or ``last``: the newest run with
    a ``kind`` kept), or ``text`` itself when it is a whole run id without a run directory:
    a preserved ref can outlive its run (a restore from a backup brings refs, not runs)."""
    if text == LAST:
        return newest_preserved(home, kind)
    try:
        return resolve_run(home, text)
    except NotFoundError:
        if RUN_ID.fullmatch(text):
            return text
        raise


def newest_preserved(home: Home, kind: Kind) -> str:
    """The newest run with a ``kind`` kept: the newest run of any kind is often one that
    landed, and ``candidates retry last`` must not mean a quarantined run."""
    found = list_preserved(home, kind)
    if not found:
        raise NotFoundError(f"no {COMMANDS[kind]} kept: `last` names the newest one")
    # Ids order runs to the second; runs made in the same second go by their manifests.
    return max(found, key=_made).run_id


def misplaced(repo: pygit2.Repository, kind: Kind, run_id: str) -> str | None:
    """One line saying where the run's change is kept when it is kept as the other kind
    (a quarantined run asked for as a candidate), else None."""
    other: Kind = "quarantine" if kind == "candidate" else "candidate"
    if ref_of(other, run_id) not in repo.references:
        return None
    was = {"candidate": "refused", "quarantine": "quarantined"}
    return (
        f"run {run_id} was {was[other]}, not {was[kind]}: "
        f"see `impyard {COMMANDS[other]} show {run_id}`"
    )


def find_preserved(home: Home, kind: Kind, run_id: str) -> Preserved:
    """The preserved change of ``run_id``: in its imp's repository when the manifest names
    the imp, else wherever a repository holds the ref (its run may be gone)."""
    check_run_id(run_id)
    ref = ref_of(kind, run_id)
    manifest = _manifest(home, run_id)
    imps = [manifest.imp] if manifest is not None else list_imps(home)
    repos = [(imp, open_repo(home, imp)) for imp in imps]
    for imp, repo in repos:
        if ref in repo.references:
            return _read(home, repo, imp, kind, ref, run_id)
    for _imp, repo in repos:
        elsewhere = misplaced(repo, kind, run_id)
        if elsewhere is not None:
            raise NotFoundError(elsewhere)
    raise NotFoundError(f"no {ref} (run {run_id} has no {kind} kept)")


def tree_change(repo: pygit2.Repository, sha: str) -> Change:
    """A preserved commit's change against its base (first parent): written files with
    their blobs and modes, and deleted paths (with those its ``Impyard-Deleted`` trailers
    name: files the run landed, then deleted). A tree entry that is not a plain file (which
    no host-written preserved tree holds) is a problem, never a written file."""
    commit = commit_at(repo, sha)
    parent = commit.parents[0].tree if commit.parents else None
    change = Change()
    for path in changed_paths(parent, commit.tree):
        entry = lookup_entry(commit.tree, path)
        if entry is None or isinstance(entry, pygit2.Tree):
            change.deleted.add(path)
        elif isinstance(entry, pygit2.Blob) and is_blob(entry):
            change.written[path] = FileState(str(entry.id), entry.size, is_executable(entry))
        else:
            mode = f"{int(entry.filemode):o}"
            change.problems.append(
                Violation(path, "special-file", f"preserved tree entry of mode {mode}")
            )
    change.deleted.update(p for p in deleted_by_trailers(commit.message) if p not in change.written)
    return change


def base_of(repo: pygit2.Repository, sha: str) -> str:
    commit = commit_at(repo, sha)
    return str(commit.parents[0].id) if commit.parents else ""


def _refs(repo: pygit2.Repository, kind: Kind) -> Iterator[tuple[str, str]]:
    prefix = PREFIXES[kind]
    for name in repo.references:
        if name.startswith(prefix) and RUN_ID.fullmatch(name[len(prefix) :]):
            yield name, name[len(prefix) :]


def _read(
    home: Home, repo: pygit2.Repository, imp: str, kind: Kind, ref: str, run_id: str
) -> Preserved:
    target = repo.lookup_reference(ref).peel(pygit2.Commit)
    sha = str(target.id)
    manifest = _manifest(home, run_id)
    if manifest is not None and manifest.imp != imp:
        manifest = None  # never describe one imp's ref with another imp's run
    when = datetime.fromtimestamp(target.commit_time, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return Preserved(
        kind=kind,
        run_id=run_id,
        imp=imp,
        ref=ref,
        commit=sha,
        base=base_of(repo, sha),
        created_at=when,
        message=cut_lines(_without_trailers(target.message), MESSAGE_LINE_CHARS, MESSAGE_CHARS),
        manifest=manifest,
    )


def _made(found: Preserved) -> tuple[str, str, str]:
    created = found.manifest.created_at if found.manifest is not None else None
    return (found.run_id[:STAMP_CHARS], created or "", found.run_id)


def _manifest(home: Home, run_id: str) -> Manifest | None:
    try:
        return manifests.read(home, run_id)
    except (NotFoundError, OSError, ValueError):  # gone or unreadable: the ref still shows
        return None


def _without_trailers(message: str) -> str:
    """The message up to its last paragraph when that paragraph is all trailers."""
    paragraphs = message.rstrip("\n").split("\n\n")
    last = paragraphs[-1].splitlines()
    if len(paragraphs) > 1 and last and all(line.startswith("Impyard-") for line in last):
        paragraphs = paragraphs[:-1]
    return "\n\n".join(paragraphs)
