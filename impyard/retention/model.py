"""A gc as data: the limits it applies, the items it plans and what became of each."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, get_args

from impyard.common.errors import ImpyardError
from impyard.policy.models import Policy

DAY_SECONDS = 86400.0
#: A spare run space waits for the next run of its size; one no run took in a day is
#: of a size no longer asked for (or a crash's half-formatted ``.tmp``).
SPARE_DAYS = 1.0
#: A shared trust bundle no run links to is kept a day: a run that just wrote one links
#: to it a moment later, and the next run of its image and CA may want it again.
BUNDLE_DAYS = 1.0

GcKind = Literal[
    "quarantine_ref",  # refs/quarantine/<run> in the imp's repo
    "candidate_ref",  # refs/candidates/<run>
    "kept_checkout",  # a quarantined run's checkout and space image
    "run_dir",  # runs/<run>/ whole: manifest, logs, receipts
    "layer",  # a checkout layer no chain needs
    "volume",  # an engine volume no unfinished run uses
    "helper",  # a helper container or volume whose creator is gone (box.helpers)
    "archive_object",  # a source-archive body not fetched for retention_days
    "spare_space",  # a formatted run space image no run took within SPARE_DAYS
    "task",  # a done or cancelled queue task older than finished_run_days
    "box_bundle",  # a shared trust bundle no run links to, older than BUNDLE_DAYS
    "journal",  # journal.jsonl, rotated (no line is lost)
    "loose_objects",  # an imp's canonical repository's backlog of loose objects, folded
]
Status = Literal["removed", "rotated", "folded", "skipped", "failed"]


class GcBusyError(ImpyardError):
    """Another gc (a command or a serve's periodic one) holds the data root's gc lock."""


@dataclass(frozen=True)
class Limits:
    """The ages and sizes one gc applies (the org policy's; one value per data root)."""

    quarantine_days: float
    candidate_days: float
    finished_run_days: float
    journal_max_bytes: int
    archive_retention_days: int

    @classmethod
    def of(cls, policy: Policy) -> Limits:
        retention = policy.retention
        return cls(
            quarantine_days=retention.quarantine_days,
            candidate_days=retention.candidate_days,
            finished_run_days=retention.finished_run_days,
            journal_max_bytes=retention.journal_max_bytes,
            archive_retention_days=policy.gateway.archive.retention_days,
        )


@dataclass(frozen=True)
class GcItem:
    """One thing a gc lets go. ``id`` names it (a run id, layer id, volume name, SHA-256,
    file name); ``path`` is the ref or the path on disk."""

    kind: GcKind
    id: str
    path: str
    reason: str
    age_days: float | None = None
    imp: str | None = None
    run: str | None = None
    bytes: int | None = None

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if self.age_days is not None:
            out["age_days"] = round(self.age_days, 2)
        return out


@dataclass(frozen=True)
class GcPlan:
    """What a gc at ``now`` would remove. ``notes`` say what it could not look at (an
    unreachable engine, an unreadable repo) and therefore leaves alone."""

    now: float
    limits: Limits
    items: list[GcItem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def of_kind(self, *kinds: GcKind) -> list[GcItem]:
        return [item for item in self.items if item.kind in kinds]

    def to_dict(self) -> dict[str, Any]:
        return {
            "now": datetime.fromtimestamp(self.now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "limits": asdict(self.limits),
            "items": [item.to_dict() for item in self.items],
            "notes": list(self.notes),
        }


@dataclass(frozen=True)
class GcOutcome:
    item: GcItem
    status: Status
    detail: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {**self.item.to_dict(), "status": self.status, "detail": self.detail}


@dataclass(frozen=True)
class GcResult:
    plan: GcPlan
    dry_run: bool
    outcomes: list[GcOutcome] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def with_status(self, *statuses: Status) -> list[GcOutcome]:
        return [o for o in self.outcomes if o.status in statuses]

    @property
    def failed(self) -> list[GcOutcome]:
        return self.with_status("failed")

    def summary(self) -> str:
        """One line for people, the command's last and serve's: ``gc: 2 removed, 1 folded``
        (each status that some item ended with, in ``Status`` order), ``gc: nothing to
        remove``, or for a dry run how many items would go."""
        planned = len(self.plan.items)
        if self.dry_run and planned:
            return f"gc (dry run): {planned} item(s) would go"
        counts = [(status, len(self.with_status(status))) for status in get_args(Status)]
        done = [f"{n} {status}" for status, n in counts if n]
        return "gc: " + ", ".join(done) if done else "gc: nothing to remove"

    def to_dict(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            **self.plan.to_dict(),
            "outcomes": [o.to_dict() for o in self.outcomes],
            "notes": [*self.plan.notes, *self.notes],
        }


def age_days(now: float, epoch: float | None) -> float | None:
    return None if epoch is None else (now - epoch) / DAY_SECONDS
