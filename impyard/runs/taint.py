"""The clean room: a run that carries conversation content writes no knowledge.

Knowledge read in a conversation is harmless; conversation content written into
knowledge bypasses the separation between the two stores, and no text filter closes
that (a paraphrase passes any scanner). So the boundary is how a run is provisioned,
not what its model chooses: a run is *tainted* when its task carries interaction
content (a channel's Memory block, or it reworks a tainted run), and under
``[knowledge] write_from = "clean-room"`` (the default) a tainted run's checkout is
mounted read-only, its in-box checkpoints and checks are refused, and the lane refuses
anything from it with the rule ``tainted-run`` (a candidate kept while ``any-run`` was
set and retried after a switch included). What it does not stop: a clean run whose
owner pastes conversation text into its prompt.
"""

from __future__ import annotations

from impyard.home import Home
from impyard.knowledge.change import KnowledgeLimits, Violation
from impyard.runs import manifest as manifests
from impyard.runs.model import Manifest, RunRequest

TAINTED_RULE = "tainted-run"
READ_ONLY = "tainted run: knowledge is read-only"


def taint_of(home: Home, request: RunRequest) -> str | None:
    """Why a run of ``request`` is tainted (None: it is clean)."""
    if request.channel:
        return f"its task carries channel {request.channel!r}'s Memory block"
    if request.rework is not None:
        reworked = manifests.read_or_none(home, request.rework.of)
        if reworked is not None and reworked.tainted:
            return f"it reworks tainted run {reworked.run_id}"
    return None


def read_only_knowledge(m: Manifest, limits: KnowledgeLimits) -> bool:
    """Whether the run's checkout is read-only to it (a tainted run in a clean room)."""
    return m.tainted and limits.write_from == "clean-room"


def tainted_refusal(m: Manifest, limits: KnowledgeLimits) -> Violation | None:
    """Why the lane refuses everything of run ``m`` (None: it may land)."""
    if not read_only_knowledge(m, limits):
        return None
    why = m.taint or "it carries conversation content"
    return Violation("", TAINTED_RULE, f"{READ_ONLY} ({why}); knowledge.write_from is clean-room")
