"""Who repaired what: the acting owner, the run's manifest record of each repair and its
journal event.

A repair that changes refs, main or the run's space is recorded in the manifest as
``pending`` before it acts and settled after, under the run's owner lock, so two
repairs of one run never interleave and a host that dies in one leaves a trace the next
repair picks up.
"""

from __future__ import annotations

import contextlib
import os
import pwd
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

from impyard.common import names
from impyard.common.errors import ImpyardError
from impyard.home import Home
from impyard.journal.log import Journal
from impyard.knowledge.validation.violations import digest
from impyard.repair.preserved import Kind
from impyard.runs.records import manifest as manifests
from impyard.runs.records.model import Manifest, RepairAction, RepairRecord
from impyard.runs.records.owner import RunOwnership

#: Journal event of each repair action.
EVENTS: dict[RepairAction, str] = {
    "retry": "repair.retried",
    "approve": "repair.approved",
    "drop": "repair.dropped",
    "export": "repair.exported",
}


#: Who acts instead of this process's user, inside ``acting_as`` (the console: ``web``).
_ACTING: ContextVar[str | None] = ContextVar("impyard_acting_owner", default=None)


@contextlib.contextmanager
def acting_as(name: str) -> Iterator[None]:
    """Repairs inside the block are recorded as done by ``name``."""
    token = _ACTING.set(name)
    try:
        yield
    finally:
        _ACTING.reset(token)


def acting_owner() -> str:
    """Who is acting: the name ``acting_as`` set, else ``$USER``, else the name of this
    process's uid, else ``uid <n>``."""
    named = _ACTING.get()
    if named:
        return named
    user = os.environ.get("USER", "").strip()
    if user and user.isprintable():
        return user
    uid = os.getuid()
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


@contextlib.contextmanager
def owning(home: Home, run_id: str, *, claim: bool = True) -> Iterator[Manifest]:
    """The run's manifest, read under its owner lock (held until the block ends).
    ``claim`` False (a dry run) only looks: refused as a repair would be, it holds and
    creates nothing, and the manifest may change meanwhile."""
    manifest = manifests.read(home, run_id)
    if not manifest.is_terminal:
        raise ImpyardError(f"run {run_id} is {manifest.state}, not finished: repair it after")
    busy = f"run {run_id} is being driven or repaired by another process"
    if not claim:
        if RunOwnership.is_held(home, run_id):
            raise ImpyardError(busy)
        yield manifest
        return
    ownership = RunOwnership.claim(home, run_id)
    if ownership is None:
        raise ImpyardError(busy)
    with ownership:
        yield manifests.read(home, run_id)  # as it is now that no one else may change it


def new_record(action: RepairAction, kind: Kind, ref: str, **fields: Any) -> RepairRecord:
    """A repair by the acting owner, now (not yet written anywhere)."""
    return RepairRecord(
        action=action, kind=kind, by=acting_owner(), at=names.utc_now(), ref=ref, **fields
    )


def begin(home: Home, manifest: Manifest, record: RepairRecord) -> RepairRecord:
    """Record a repair as pending in the manifest, on disk, before it acts."""
    manifest.repairs.append(record)
    manifests.write(home, manifest)
    return record


def pending(manifest: Manifest, action: RepairAction, kind: Kind) -> RepairRecord | None:
    """A repair of this kind a dead host left pending, if any."""
    for record in reversed(manifest.repairs):
        if (record.action, record.kind, record.outcome) == (action, kind, "pending"):
            return record
    return None


def journal(
    home: Home,
    record: RepairRecord,
    *,
    run_id: str,
    imp: str,
    violations: list[Any] | None = None,
) -> None:
    """The repair's journal event: who, what, and how it ended (reasons cut like a run's)."""
    fields: dict[str, Any] = {
        "by": record.by,
        "kind": record.kind,
        "ref": record.ref,
        "outcome": record.outcome,
    }
    for name in ("checkpoint", "commit", "detail"):
        value = getattr(record, name)
        if value is not None:
            fields[name] = value
    if violations:
        found = digest(violations)
        fields["violations"] = found.kept
        fields.update(found.summary_fields())
    Journal(home.journal).record(EVENTS[record.action], run=run_id, imp=imp, **fields)
