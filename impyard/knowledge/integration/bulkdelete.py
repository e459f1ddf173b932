"""Bulk deletions wait for the owner: a change deleting more files than
``[knowledge] max_deletions`` is neither landed nor refused for its content.

Validation passes it as it would any change (the mode decides which paths a run may
delete at all); the lane then holds it with the one reason ``bulk-delete``, kept as a
candidate, and it lands only through ``candidates approve``: the same lane, the same
checks, with the gate lifted for that one landing (``approved``). An agent that wipes
a repository by mistake, or on a prompt's say-so, so never lands the wipe unconfirmed.
The count is the run's whole change against its base, what earlier checkpoints landed
included: deleting in small checkpoints does not slip under the gate.
"""

from __future__ import annotations

import dataclasses
import re

from impyard.knowledge.change import Change, KnowledgeLimits, Violation

RULE = "bulk-delete"
_HELD = re.compile(r"^held: (bulk-delete \(\d+ files\))")


def hold(change: Change, limits: KnowledgeLimits, run_id: str) -> list[Violation]:
    """The hold on ``change`` (one violation), or none when it may land on its own."""
    limit, count = limits.max_deletions, len(change.deleted)
    if limit is None or count <= limit:
        return []
    message = (
        f"held: bulk-delete ({count} files): more than knowledge.max_deletions ({limit}); "
        f"it lands only when the owner approves it: `impyard candidates approve {run_id}` "
        "(--dry-run lists what lands and what goes)"
    )
    return [Violation("", RULE, message)]


def held(violations: list[Violation]) -> str | None:
    """``bulk-delete (N files)`` when the hold is the change's only reason, else None (a
    change refused for its content as well is refused, whatever its deletions)."""
    if len(violations) != 1 or violations[0].rule != RULE:
        return None
    found = _HELD.match(violations[0].message)
    return found.group(1) if found else None


def approved(limits: KnowledgeLimits) -> KnowledgeLimits:
    """The limits of an approved landing: every other limit as it is, no deletion gate."""
    return dataclasses.replace(limits, max_deletions=None)
