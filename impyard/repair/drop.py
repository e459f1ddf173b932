"""Drop a preserved change: its ref and, for a quarantined run, the kept checkout and space.

Recorded ``pending`` in the run's manifest before anything is removed, so a host that
dies half-way leaves a drop the next one finishes. Main is never touched.

Dry run: what a drop would remove now (the ref and the commit it names, the kept
checkout and its space), with nothing removed, recorded or journaled.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import pygit2

from impyard import backup
from impyard.common.errors import NotFoundError
from impyard.common.names import check_run_id
from impyard.home import Home
from impyard.knowledge.imps import open_repo
from impyard.repair import kept, records
from impyard.repair.preserved import Kind, find_preserved, misplaced, ref_of
from impyard.runs.records import manifest as manifests
from impyard.runs.records.model import Manifest


@dataclass(frozen=True)
class DropResult:
    kind: Kind
    run_id: str
    imp: str
    ref: str
    #: The preserved commit the ref named (None when only a kept checkout was left).
    commit: str | None
    #: Whether the kept checkout and space went (a dry run: would go).
    checkout_removed: bool
    #: Where they are on disk (the image, the mount point, or the checkout directory).
    space_paths: list[str] = field(default_factory=list)
    dry_run: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "run_id": self.run_id,
            "imp": self.imp,
            "ref": self.ref,
            "dry_run": self.dry_run,
            "commit": self.commit,
            "checkout_removed": self.checkout_removed,
            "space_paths": self.space_paths,
        }


def drop(home: Home, kind: Kind, run_id: str, *, dry_run: bool = False) -> DropResult:
    """Remove the run's ``kind`` ref (and a quarantined run's kept checkout); ``dry_run``:
    say what that removes, and remove nothing."""
    ref = ref_of(kind, check_run_id(run_id))
    if not home.manifest(run_id).is_file():
        # The run is gone (gc'd); its ref may not be. Nothing but the ref to remove.
        found = find_preserved(home, kind, run_id)
        if dry_run:
            return DropResult(kind, run_id, found.imp, ref, found.commit, False, dry_run=True)
        open_repo(home, found.imp).references.delete(ref)
        backup.notify(home, found.imp)
        record = records.new_record("drop", kind, ref, commit=found.commit, outcome="dropped")
        records.journal(home, record, run_id=run_id, imp=found.imp)
        return DropResult(kind, run_id, found.imp, ref, found.commit, False)
    with records.owning(home, run_id, claim=not dry_run) as m:
        repo = open_repo(home, m.imp)
        commit = _target(repo, ref)
        space = kind == "quarantine" and kept.has_space(m)
        earlier = records.pending(m, "drop", kind)
        if commit is None and not space and earlier is None:
            elsewhere = misplaced(repo, kind, run_id)
            raise NotFoundError(elsewhere or f"no {ref}: run {run_id} has no {kind} kept")
        paths = _space_paths(m) if space else []
        if dry_run:
            commit = earlier.commit if earlier is not None else commit
            return DropResult(kind, run_id, m.imp, ref, commit, space, paths, dry_run=True)
        record = earlier or records.begin(
            home, m, records.new_record("drop", kind, ref, commit=commit)
        )
        if commit is not None:
            repo.references.delete(ref)
            backup.notify(home, m.imp)
        if space:
            kept.remove(home, m)
        record.outcome = "dropped"
        if kind == "candidate":
            m.candidate_ref = None
        else:
            m.quarantine_ref = None
        manifests.write(home, m)
        records.journal(home, record, run_id=run_id, imp=m.imp)
        return DropResult(kind, run_id, m.imp, ref, record.commit, space, paths)


def _target(repo: pygit2.Repository, ref: str) -> str | None:
    if ref not in repo.references:
        return None
    return str(repo.lookup_reference(ref).peel(pygit2.Commit).id)


def _space_paths(m: Manifest) -> list[str]:
    """What of the run's kept checkout and space is on disk."""
    space, checkout = m.space, m.checkout
    found = [space.image, space.mount] if space is not None else []
    if space is None and checkout is not None:
        found.append(checkout.root)
    return [str(path) for path in found if path is not None and os.path.lexists(path)]
