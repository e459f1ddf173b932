"""A purge carried to every backup remote: the rewritten refs force-pushed under a lease,
the deleted ones deleted, a local remote compacted; reported per remote.

The lease: a remote ref is overwritten only if it still names what this data root had
there before the purge (or is absent); one that moved (another data root pushed to it)
is left, and the remote reported. A remote on this machine is compacted like the
canonical repository, so it no longer holds the purged objects; a network remote keeps
them, unreachable, until its own gc, and the report says so.
"""

from __future__ import annotations

from dataclasses import dataclass

import pygit2

from impyard.backup.remotes import Location, locate, scrub
from impyard.backup.sync import configured_remotes
from impyard.backup.transport import Callbacks, configure_transport
from impyard.home import Home
from impyard.purge.compact import compact_repository

UNPRUNED = "still holds the purged objects, unreachable, until its own gc"


@dataclass(frozen=True)
class RemotePurge:
    remote: str  # the location's label (no password)
    updated: int = 0
    deleted: int = 0
    #: A local remote compacted: it holds nothing unreachable.
    pruned: bool = False
    note: str | None = None
    error: str | None = None

    def as_dict(self) -> dict[str, object]:
        return dict(self.__dict__)


def purge_remotes(
    home: Home,
    imp: str,
    repo: pygit2.Repository,
    moves: dict[str, tuple[pygit2.Oid, pygit2.Oid | None]],
    *,
    write: bool,
) -> list[RemotePurge]:
    """Carry ``moves`` (ref -> (before, after or None: deleted)) to every configured
    remote of the imp; a failure is a result, never an exception."""
    results = []
    for base in configured_remotes(home):
        location = locate(base, imp, home.root)
        try:
            results.append(_one(repo, location, moves, write=write))
        except (pygit2.GitError, OSError, ValueError) as exc:
            error = scrub(str(exc).splitlines()[0] if str(exc) else type(exc).__name__, base)
            results.append(RemotePurge(location.label, error=error))
    return results


def _one(
    repo: pygit2.Repository,
    location: Location,
    moves: dict[str, tuple[pygit2.Oid, pygit2.Oid | None]],
    *,
    write: bool,
) -> RemotePurge:
    configure_transport()
    if location.path is not None and not location.path.is_dir():
        return RemotePurge(location.label, note="holds no backup of this imp yet")
    remote = repo.remotes.create_anonymous(location.url)
    theirs = {h.name: h.oid for h in remote.list_heads(callbacks=Callbacks()) if h.name}
    specs: list[str] = []
    moved: list[str] = []
    updated = deleted = 0
    for name, (before, after) in sorted(moves.items()):
        now = theirs.get(name)
        if now is None and after is None:
            continue
        if now is not None and now != before and now != after:
            moved.append(name)
            continue
        if after is None:
            specs.append(f":{name}")
            deleted += 1
        elif now != after:
            specs.append(f"+{after}:{name}")
            updated += 1
    if moved:
        return RemotePurge(
            location.label,
            error=f"{', '.join(moved)} moved since this data root last pushed: left as it is",
        )
    if write and specs:
        callbacks = Callbacks()
        repo.remotes.create_anonymous(location.url).push(specs, callbacks=callbacks)
        if callbacks.refused:
            why = "; ".join(f"{ref}: {reason}" for ref, reason in sorted(callbacks.refused.items()))
            return RemotePurge(location.label, error=f"the remote refused {why}")
    if location.path is None:
        return RemotePurge(location.label, updated, deleted, note=UNPRUNED)
    if write:
        compact_repository(location.path)
    return RemotePurge(location.label, updated, deleted, pruned=True)
