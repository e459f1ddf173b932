"""``candidates approve``: the owner's approval of a change held for its deletions.

A change deleting more files than ``knowledge.max_deletions`` waits, held, as a
candidate (``knowledge.bulkdelete``). Approving it is a retry with that one gate lifted:
the same reading, validation and lane, exactly once, recorded (``approve``) and
journaled (``repair.approved``) as the acting person's decision. The preview is the
same function in dry-run mode, so it lists exactly what would land and what would go.
A second approval of a change that landed changes nothing and says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from impyard.home import Home
from impyard.repair.preserved import Kind
from impyard.repair.retry import RetryResult, retry
from impyard.runs.records import manifest as manifests
from impyard.settings import Settings


@dataclass(frozen=True)
class AlreadyApproved:
    """An approval that found the change approved and landed before: nothing changed."""

    run_id: str
    by: str
    at: str
    commit: str | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "already_approved": True,
            "by": self.by,
            "at": self.at,
            "commit": self.commit,
            "landed": False,
        }


def approve(
    settings: Settings, kind: Kind, run_id: str, *, dry_run: bool = False
) -> RetryResult | AlreadyApproved:
    """Land run ``run_id``'s held change past its deletion gate, or preview it."""
    home = Home(settings.home)
    earlier = _landed_approval(home, run_id)
    if earlier is not None:
        return earlier
    return retry(settings, kind, run_id, dry_run=dry_run, action="approve")


def _landed_approval(home: Home, run_id: str) -> AlreadyApproved | None:
    m = manifests.read_or_none(home, run_id)
    if m is None:
        return None
    for record in reversed(m.repairs):
        if record.action == "approve" and record.outcome in ("integrated", "empty"):
            return AlreadyApproved(run_id, record.by, record.at, record.commit)
    return None
