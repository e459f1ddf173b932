"""Drop a preserved change: its ref and, for a quarantined run, the kept checkout and space.

Recorded ``pending`` in the run's manifest before anything is removed, so a host that
dies half-way leaves a drop the next one finishes. Main is never touched.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pygit2

from impyard import backup
from impyard.errors import NotFoundError
from impyard.home import Home
from impyard.knowledge.imps import open_repo
from impyard.names import check_run_id
from impyard.repair import kept, records
from impyard.repair.preserved import Kind, find_preserved, ref_of
from impyard.runs import manifest as manifests


@dataclass(frozen=True)
class DropResult:
    kind: Kind
    run_id: str
    imp: str
    ref: str
    #: The preserved commit the ref named (None when only a kept checkout was left).
    commit: str | None
    checkout_removed: bool

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "run_id": self.run_id,
            "imp": self.imp,
            "ref": self.ref,
            "commit": self.commit,
            "checkout_removed": self.checkout_removed,
        }


def drop(home: Home, kind: Kind, run_id: str) -> DropResult:
    """Remove the run's ``kind`` ref (and a quarantined run's kept checkout)."""
    ref = ref_of(kind, check_run_id(run_id))
    if not home.manifest(run_id).is_file():
        # The run is gone (gc'd); its ref may not be. Nothing but the ref to remove.
        found = find_preserved(home, kind, run_id)
        open_repo(home, found.imp).references.delete(ref)
        backup.notify(home, found.imp)
        record = records.new_record("drop", kind, ref, commit=found.commit, outcome="dropped")
        records.journal(home, record, run_id=run_id, imp=found.imp)
        return DropResult(kind, run_id, found.imp, ref, found.commit, False)
    with records.owning(home, run_id) as m:
        repo = open_repo(home, m.imp)
        commit = _target(repo, ref)
        space = kind == "quarantine" and kept.has_space(m)
        earlier = records.pending(m, "drop", kind)
        if commit is None and not space and earlier is None:
            raise NotFoundError(f"no {ref}: run {run_id} has no {kind} kept")
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
        return DropResult(kind, run_id, m.imp, ref, record.commit, space)


def _target(repo: pygit2.Repository, ref: str) -> str | None:
    if ref not in repo.references:
        return None
    return str(repo.lookup_reference(ref).peel(pygit2.Commit).id)
