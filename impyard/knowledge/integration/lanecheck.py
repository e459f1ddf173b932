"""A change's validation before it waits for the lane: split from what the run already
landed, looked for on main (a checkpoint a dead host landed), checked against its base
(``validate.check_change``), and its commit message written.

``lane.integrate`` starts here, and so does its ``dry_run`` (a repair's preview), so a
dry run refuses exactly what the lane refuses before its turn.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from impyard.common.errors import UsageError
from impyard.common.names import check_run_id
from impyard.home import Home
from impyard.knowledge.change import Change, KnowledgeLimits, Mode, Violation
from impyard.knowledge.imps import require_imp
from impyard.knowledge.integration import bulkdelete
from impyard.knowledge.integration.lanerecord import (
    LaneResult,
    Outcome,
    Trailers,
    commit_message,
    find_landed_commit,
)
from impyard.knowledge.integration.readers import validation_reader
from impyard.knowledge.validation.citations import Receipts
from impyard.knowledge.validation.increments import Landed, Split, split
from impyard.knowledge.validation.validate import check_change


@dataclass(frozen=True)
class Prepared:
    """A validated change waiting for the lane: all a pass needs, computed by its caller."""

    parts: Split
    trailers: Trailers
    namespace: str
    mode: Mode
    limits: KnowledgeLimits
    keep_refused: bool
    message: str


def prepare(
    home: Home,
    imp: str,
    change: Change,
    *,
    base: str,
    namespace: str,
    mode: Mode,
    limits: KnowledgeLimits,
    trailers: Trailers,
    landed: Landed | None,
    keep_refused: bool,
    receipts: Receipts | None,
    refusal: Violation | None = None,
    screened: Sequence[Violation] = (),
) -> LaneResult | Prepared:
    """How the change ends without the lane (nothing new, landed already, refused), or
    what the lane replays onto main. See ``lane.integrate`` for the arguments."""
    check_run_id(trailers.run)
    if (trailers.imp, trailers.base, trailers.mode) != (imp, base, mode):
        raise UsageError("trailers disagree with the run being integrated (imp, base or mode)")
    trailers.lines()  # refuse unusable trailer values before any work
    require_imp(home, imp)
    parts = split(change, landed or {})
    increment = parts.increment
    outcome = Outcome(home, parts, trailers, keep_refused)
    if increment.is_empty:
        return outcome.landed("empty")
    if refusal is not None:  # the run may land nothing at all (a tainted run, clean room)
        return outcome.refused("rejected", [refusal])
    with validation_reader(home, imp, base) as reader:
        found = find_landed_commit(reader, trailers.run, base, trailers.checkpoint)
        if found is not None:
            return outcome.landed("integrated", found)
        checked = check_change(
            reader,
            base,
            parts.effective,
            namespace=namespace,
            mode=mode,
            limits=limits,
            receipts=receipts,
        )
    # A bulk deletion is held for the owner, and named among a refusal's other reasons.
    every = [
        *checked.violations,
        *screened,
        *bulkdelete.hold(parts.effective, limits, trailers.run),
    ]
    if every:
        return outcome.refused("rejected", every)
    # Notes an earlier checkpoint landed had their receipts in that checkpoint's commit.
    cited = [c for path in increment.written for c in checked.citations.get(path, ())]
    message = commit_message(increment, trailers, cited)
    return Prepared(parts, trailers, namespace, mode, limits, keep_refused, message)
