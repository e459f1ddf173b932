"""Runs as data: a request in, a manifest on disk, an outcome out."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from impyard.knowledge.change import Checkpoint, Mode

# The manifest's ``state`` names the step about to happen (written before it starts).
RunState = Literal[
    "created",  # recorded; nothing acted on yet
    "preparing",  # materializing the checkout, task file, volume
    "starting",  # creating and starting the box
    "running",  # the box runs; container_id is known
    "checkpointing",  # clean exit recorded; snapshot, validate, integrate
    "quarantining",  # abnormal exit recorded; snapshot onto refs/quarantine
    "finished",  # terminal: checkpoint holds the outcome
]
TERMINAL_STATES: frozenset[str] = frozenset({"finished"})

EXIT_CODES: dict[str, int] = {
    "integrated": 0,
    "empty": 0,
    "rejected": 3,
    "quarantined": 4,
    "conflict": 5,
}


@dataclass(frozen=True)
class RunRequest:
    imp: str
    prompt: str
    reorganize: bool = False
    channel: str | None = None
    command: str | None = None  # owner override, run as /bin/sh -c CMD
    timeout_seconds: float | None = None
    task_id: str | None = None


@dataclass
class Manifest:
    """``runs/<run-id>/manifest.json``: the run record, rewritten atomically at each state."""

    run_id: str
    imp: str
    task_id: str | None
    channel: str | None
    mode: Mode
    base_commit: str
    namespace: str
    state: RunState = "created"
    checkpoint: Checkpoint = "pending"
    exit_code: int | None = None
    produced_commit: str | None = None
    validation_errors: list[dict[str, str]] = field(default_factory=list)
    started_at: str | None = None
    ended_at: str | None = None
    created_at: str | None = None
    container_id: str | None = None
    container_name: str | None = None
    image: str | None = None
    image_id: str | None = None
    oom_killed: bool = False
    #: On an OOM kill, the most the box's /tmp held (tmpfs pages count against its memory).
    oom_tmp_bytes: int | None = None
    timed_out: bool = False
    reason: str | None = None  # why a run was quarantined, conflicted or failed
    candidate_ref: str | None = None
    quarantine_ref: str | None = None
    checkout: dict[str, Any] | None = None
    #: The run's writable space (``runspace.RunSpace``): where its checkout lives, bounded.
    space: dict[str, Any] | None = None
    volume: str | None = None
    #: The wall-clock limit the run was admitted with (policy, or a shorter --timeout);
    #: recovery enforces it from ``started_at``, whatever today's policy says.
    timeout_seconds: float | None = None
    #: When more violations were found than the manifest keeps: how many, by rule.
    validation_errors_total: int | None = None
    validation_error_counts: dict[str, int] | None = None
    timings_ms: dict[str, float] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Manifest:
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})

    @property
    def is_terminal(self) -> bool:
        return self.state in TERMINAL_STATES


@dataclass(frozen=True)
class RunOutcome:
    manifest: Manifest

    @property
    def exit_code(self) -> int:
        return EXIT_CODES.get(self.manifest.checkpoint, 1)
