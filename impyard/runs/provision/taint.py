"""The clean room: a run that carries conversation content writes no knowledge.

Knowledge read in a conversation is harmless; conversation content written into
knowledge bypasses the separation between the two stores, and no text filter closes
that (a paraphrase passes any scanner). So the boundary is how a run is provisioned,
not what its model chooses: a run is *tainted* when its task carries interaction
content (a channel's Memory block, or it reworks a tainted run), and under
``[knowledge] write_from = "clean-room"`` (the default) a tainted run's checkout is
mounted read-only, its in-box checkpoints and checks are refused, and the lane refuses
anything from it with the rule ``tainted-run`` (a candidate kept while ``any-run`` was
set and retried after a switch included). Under ``"any-run"`` a tainted run may land,
but each file it writes is scanned against the participants of the conversation that
reached it (``memory.participants``); a file naming one is a violation
(``participant-named``). What it does not stop: a paraphrase, or a clean run whose owner
pastes conversation text into its prompt.
"""

from __future__ import annotations

from impyard.home import Home
from impyard.knowledge.change import Change, KnowledgeLimits, Violation
from impyard.memory.participants import NAMES_A_PARTICIPANT, channel_participants
from impyard.runs.records import manifest as manifests
from impyard.runs.records.model import Manifest, RunRequest

TAINTED_RULE = "tainted-run"
PARTICIPANT_RULE = "participant-named"
READ_ONLY = "tainted run: knowledge is read-only"
#: How far back a rework chain is followed to the channel that tainted it.
_MAX_CHAIN = 100


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


def taint_channel(home: Home, m: Manifest) -> str | None:
    """The channel whose conversation reached run ``m``: its own, or (a rework of a
    tainted run) the one its chain started in."""
    seen = 0
    current: Manifest | None = m
    while current is not None and seen < _MAX_CHAIN:
        if current.channel:
            return current.channel
        if current.rework_of is None:
            return None
        current = manifests.read_or_none(home, current.rework_of)
        seen += 1
    return None


def participant_violations(home: Home, m: Manifest, change: Change) -> list[Violation]:
    """Each file tainted run ``m`` wrote that names a participant of the conversation
    that reached it (a clean run's files are not scanned; under the clean room a tainted
    run's are refused whole, unscanned)."""
    if not m.tainted:
        return []
    found = channel_participants(home, m.imp, taint_channel(home, m))
    if not len(found):
        return []
    from impyard.knowledge.imps import open_repo

    repo = open_repo(home, m.imp)
    violations = []
    for path in sorted(change.written):
        oid = change.written[path].blob
        data = change.unstored.get(oid)
        if data is None:
            data = repo[oid].read_raw()
        named = found.named_in(data.decode("utf-8", "replace"))
        if named:
            kinds = ", ".join(sorted({p.kind for p in named}))
            violations.append(Violation(path, PARTICIPANT_RULE, f"{NAMES_A_PARTICIPANT} ({kinds})"))
    return violations
