"""Runs as data: a request in, a manifest on disk, an outcome out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from impyard.box.spec import BoxExit, Runtime
from impyard.knowledge.change import Checkpoint, KnowledgeLimits, Mode, Violation
from impyard.knowledge.checkouts.checkout_record import Checkout
from impyard.knowledge.checkouts.runspace import RunSpace

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


class ReworkOrigin(BaseModel):
    """What a rework run starts from: the rejected run, the preserved commit holding its
    files (read by oid), the namespace they were named in, and why they were refused.
    Recorded with the rework task when it is queued (the run's record may be gone by the
    time the task runs)."""

    model_config = ConfigDict(extra="ignore")

    #: The run this one reworks, and the first run of the chain.
    of: str
    origin: str
    kind: Literal["candidate", "quarantine"]
    ref: str
    commit: str
    namespace: str
    reason: str | None = None
    note: str | None = None
    violations: list[Violation] = Field(default_factory=list)
    violations_total: int = 0


@dataclass(frozen=True)
class RunRequest:
    imp: str
    prompt: str
    reorganize: bool = False
    channel: str | None = None
    command: str | None = None  # owner override, run as /bin/sh -c CMD
    timeout_seconds: float | None = None
    task_id: str | None = None
    #: A rework task's run: it starts from these files and quotes these violations.
    rework: ReworkOrigin | None = None


class CheckpointRecord(BaseModel):
    """One checkpoint the box asked for while it ran. Written as ``pending`` before the lane
    acts; recovery settles a pending one by what is on main."""

    model_config = ConfigDict(validate_assignment=True, extra="ignore")

    number: int
    state: Literal["pending", "integrated"] = "pending"
    requested_at: str
    landed_at: str | None = None
    commit: str | None = None
    #: Paths the checkpoint landed (written or deleted), the first MAX_LISTED of them.
    files: list[str] = Field(default_factory=list)
    file_count: int = 0


#: How many paths a checkpoint record lists in the manifest (all count in file_count).
MAX_LISTED = 1000

RepairAction = Literal["retry", "approve", "drop", "export", "rework"]


class RepairRecord(BaseModel):
    """One owner action on what the run preserved (``impyard candidates|quarantine ...``).

    A retry or drop is recorded ``pending`` before it acts, so a host that dies in one
    leaves the checkpoint number a retry lands under: the next retry reuses it and
    finds its commit on main instead of landing the change again."""

    model_config = ConfigDict(validate_assignment=True, extra="ignore")

    action: RepairAction
    kind: Literal["candidate", "quarantine"]
    by: str
    at: str
    #: pending, then integrated | empty | rejected | conflict | dropped | exported
    outcome: str = "pending"
    ref: str | None = None
    #: The checkpoint number a retry lands under (its Impyard-Checkpoint trailer).
    checkpoint: int | None = None
    commit: str | None = None
    violations: int | None = None
    #: Where the change came from (a retry) or went (an export, a rework's task).
    detail: str | None = None


class Manifest(BaseModel):
    """``runs/<run-id>/manifest.json``: the run record, rewritten atomically at each state.

    Typed and validated on every assignment, so a misspelt or mistyped field is an error,
    not a silently dropped key. Steps move it with the named transitions below. Older
    manifests (plain dicts for the checkout, no limits) still load.
    """

    model_config = ConfigDict(validate_assignment=True, extra="ignore")

    run_id: str
    imp: str
    task_id: str | None
    channel: str | None
    mode: Mode
    base_commit: str
    namespace: str
    #: A rework run: the run whose rejected files it started from.
    rework_of: str | None = None
    #: The first run of its rework chain (itself when it is no rework).
    rework_origin: str | None = None
    state: RunState = "created"
    checkpoint: Checkpoint = "pending"
    exit_code: int | None = None
    produced_commit: str | None = None
    validation_errors: list[Violation] = Field(default_factory=list)
    started_at: str | None = None
    ended_at: str | None = None
    created_at: str | None = None
    container_id: str | None = None
    container_name: str | None = None
    #: The box was a ready pool box claimed by this run, not one started for it.
    warm: bool = False
    #: The ready-box pool the run looked in (``[box.warm]``): with ``warm`` false, a miss.
    warm_pool: str | None = None
    #: A foreground ``impyard run`` handed this run to a running serve, which drove it.
    handed: bool = False
    #: The run carries conversation content (``runs.provision.taint``), and why; under the clean
    #: room its checkout is read-only and it lands nothing.
    tainted: bool = False
    taint: str | None = None
    #: The tasks the run filed through ``impyard-task`` (the bridge out of a tainted run).
    filed_tasks: list[str] = Field(default_factory=list)
    image: str | None = None
    image_id: str | None = None
    #: The engine runtime the box runs under (runc or runsc), fixed when the run is admitted;
    #: None in a manifest from before runtimes were recorded (those ran under runc).
    runtime: Runtime | None = None
    #: The cluster node the box ran on; None for a box on this host's engine.
    node: str | None = None
    #: The fencing token of the run's lease on that node: after a restart of serve, only
    #: a result under this token is taken back (a node's message under any other is not).
    node_lease: str | None = None
    oom_killed: bool = False
    #: On an OOM kill, the most the box's /tmp held (tmpfs pages count against its memory).
    oom_tmp_bytes: int | None = None
    timed_out: bool = False
    reason: str | None = None  # why a run was quarantined, conflicted or failed
    candidate_ref: str | None = None
    quarantine_ref: str | None = None
    checkout: Checkout | None = None
    #: The run's writable space: where its checkout lives, bounded.
    space: RunSpace | None = None
    volume: str | None = None
    #: The wall-clock limit the run was admitted with (policy, or a shorter --timeout);
    #: recovery enforces it from ``started_at``, whatever today's policy says.
    timeout_seconds: float | None = None
    #: The knowledge limits the run was admitted under; recovery validates with these.
    limits: KnowledgeLimits | None = None
    #: When more violations were found than the manifest keeps: how many, by rule.
    validation_errors_total: int | None = None
    validation_error_counts: dict[str, int] | None = None
    #: Checkpoints the box asked for while it ran, in order (the exit checkpoint is not one).
    checkpoints: list[CheckpointRecord] = Field(default_factory=list)
    #: What the owner did with the run's candidate or quarantine afterwards, in order.
    repairs: list[RepairRecord] = Field(default_factory=list)
    timings_ms: dict[str, float] = Field(default_factory=dict)
    warnings: list[str] = Field(default_factory=list)
    #: The agent's step count as its adapter reported it at the end (POST /impyard/report);
    #: None when nothing was reported (no gateway, or an agent that reports none).
    agent_steps: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Manifest:
        return cls.model_validate(data)

    @property
    def is_terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    @property
    def landed_checkpoints(self) -> list[CheckpointRecord]:
        return [c for c in self.checkpoints if c.state == "integrated"]

    @property
    def next_checkpoint(self) -> int:
        """The number the run's next checkpoint (mid-run or exit) lands under."""
        return len(self.landed_checkpoints) + 1

    # -- named transitions (each is written to disk by the caller before it acts) -----

    def starting(self, container_name: str | None, image: str) -> None:
        self.state, self.container_name, self.image = "starting", container_name, image

    def running(self, container_id: str, image_id: str, started_at: str) -> None:
        self.state, self.container_id, self.image_id = "running", container_id, image_id
        self.started_at = started_at

    def exited(self, box_exit: BoxExit, reason: str | None) -> None:
        """How the box ended; ``reason`` None means a clean exit to checkpoint."""
        self.state = "checkpointing" if reason is None else "quarantining"
        self.exit_code, self.oom_killed = box_exit.exit_code, box_exit.oom_killed
        self.timed_out, self.reason = box_exit.timed_out, reason

    def quarantining(self, reason: str) -> None:
        self.state, self.reason = "quarantining", reason

    def finished(self, checkpoint: Checkpoint, ended_at: str, **outcome: Any) -> None:
        """The terminal state; ``outcome`` names result fields, each validated."""
        for name, value in outcome.items():
            if name not in FINISH_FIELDS:
                raise TypeError(f"{name!r} is not an outcome field of a run")
            setattr(self, name, value)
        self.state, self.checkpoint, self.ended_at = "finished", checkpoint, ended_at


#: What ``Manifest.finished`` may set beside the checkpoint.
FINISH_FIELDS = frozenset(
    {
        "produced_commit",
        "candidate_ref",
        "quarantine_ref",
        "reason",
        "validation_errors",
        "validation_errors_total",
        "validation_error_counts",
    }
)


@dataclass(frozen=True)
class RunOutcome:
    manifest: Manifest

    @property
    def exit_code(self) -> int:
        return EXIT_CODES.get(self.manifest.checkpoint, 1)
