"""Preserving refused work off main: quarantine and the candidate commits the lane keeps.

A preserved commit holds the base tree plus every regular file of the change,
refused ones included (a retry under a changed policy can land only what is kept).
Entries the snapshot did not read (links, special files, bad names, files past
``candidate_max_bytes``) and paths no tree may hold (Git metadata, hidden or
instruction files — which ``git fsck --strict`` or an owner's own agent tooling
would trip over) are listed by path and reason under ``NOT_KEPT`` in the message,
never stored. ``main`` is never touched.

A file a run landed at a checkpoint and then deleted is not in the run's base, so
the tree alone cannot say it went: such a commit names it in an ``Impyard-Deleted``
trailer, and reading the change back (``tree_change`` of ``repair.preserved``)
counts it deleted.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import cast

import pygit2

from impyard.common.errors import KnowledgeError
from impyard.common.names import check_run_id
from impyard.knowledge.change import Change, FileState, Violation
from impyard.knowledge.store.refnames import quarantine_ref
from impyard.knowledge.store.repo import host_signature
from impyard.knowledge.store.trees import PathConflict, build_tree
from impyard.knowledge.validation.pathnames import is_storable_path
from impyard.knowledge.validation.violations import digest

DELETED_TRAILER = "Impyard-Deleted"
#: The message paragraph listing what a preserved commit does not hold.
NOT_KEPT = "Not kept (not in this commit):"
#: Headings older preserved commits used for the same list.
_OLD_NOT_KEPT = ("Refused entries (not stored):", "Not stored (unsafe path or clash):")


def deleted_trailers(paths: Iterable[str]) -> list[str]:
    """One ``Impyard-Deleted: <path>`` trailer per path, sorted."""
    lines = []
    for path in sorted(set(paths)):
        # Every such path landed on main, so the lane found it storable; this guards the
        # commit message itself (one line per trailer, no edge spaces to lose).
        if not path or path != path.strip() or any(ch in path for ch in "\r\n"):
            raise KnowledgeError(f"path {path!r} cannot be written as a trailer")
        lines.append(f"{DELETED_TRAILER}: {path}")
    return lines


def deleted_by_trailers(message: str) -> list[str]:
    """The paths a preserved commit's ``Impyard-Deleted`` trailers name (last paragraph)."""
    last = message.rstrip("\n").rsplit("\n\n", 1)[-1]
    prefix = f"{DELETED_TRAILER}: "
    return [line[len(prefix) :] for line in last.split("\n") if line.startswith(prefix)]


def preserved_commit(
    repo: pygit2.Repository,
    base: str,
    change: Change,
    *,
    summary: str,
    details: Sequence[str],
    author: pygit2.Signature,
    trailers: Sequence[str],
) -> str:
    """A commit (parent ``base``) of base tree + the storable part of ``change``; not on any
    ref. The message lists what of the change it does not hold: ``change.problems`` (never
    read) and paths no tree may hold or that clash."""
    base_commit = cast(pygit2.Commit, repo[base])
    written: dict[str, FileState] = {}
    omitted: list[str] = []
    for path, state in sorted(change.written.items()):
        if is_storable_path(path):
            written[path] = state
        else:
            omitted.append(path)
    deleted = set(change.deleted)
    while True:
        try:
            tree = build_tree(repo, base_commit.tree, written, deleted)
            break
        except PathConflict as exc:
            # Keep what fits; the clash itself is in the violations listed below.
            dropped = [p for p in written if p == exc.path or p.startswith(exc.path + "/")]
            if not dropped:
                dropped = [p for p in written if exc.path.startswith(p + "/")]
            for path in dropped or list(written):
                written.pop(path)
                omitted.append(path)
    parts = [summary, *details]
    not_kept = [
        *change.problems,
        *(Violation(p, "not-stored", "a path no tree may hold, or a clash") for p in omitted),
    ]
    if not_kept:
        parts.append(NOT_KEPT + "\n" + "\n".join(digest(not_kept).lines()))
    parts.append("\n".join(trailers))
    message = "\n\n".join(parts) + "\n"
    oid = repo.create_commit(None, author, host_signature(), message, tree, [base_commit.id])
    return str(oid)


def quarantine(
    repo: pygit2.Repository,
    run_id: str,
    base: str,
    change: Change,
    reason: str,
    *,
    gone: Iterable[str] = (),
) -> str:
    """Write refs/quarantine/<run-id> (a retry rewrites it); return the commit sha.
    ``gone``: files the run landed at a checkpoint that ``change`` (then the box's final
    tree) no longer holds, named in trailers as a candidate names them."""
    check_run_id(run_id)
    first = reason.splitlines()[0] if reason.strip() else "abnormal exit"
    details = [reason] if reason.strip() and reason.strip() != first else []
    commit = preserved_commit(
        repo,
        base,
        change,
        summary=f"Quarantine run {run_id}: {first}",
        details=details,
        author=host_signature(),
        trailers=[f"Impyard-Run: {run_id}", f"Impyard-Base: {base}", *deleted_trailers(gone)],
    )
    repo.references.create(quarantine_ref(run_id), pygit2.Oid(hex=commit), force=True)
    return commit


def not_kept_lines(message: str) -> list[str]:
    """The ``- path: rule: reason`` lines of what a preserved commit's message says it
    does not hold (empty when it holds the whole change)."""
    found: list[str] = []
    for paragraph in message.split("\n\n"):
        heading, _, rest = paragraph.partition("\n")
        if heading in (NOT_KEPT, *_OLD_NOT_KEPT):
            found.extend(line for line in rest.splitlines() if line.strip())
    return found
