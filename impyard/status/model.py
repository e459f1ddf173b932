"""The ``Status`` document: every section as data, then problems and warnings."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

ImageState = Literal["present", "missing", "unknown"]
BackupState = Literal["current", "lagging", "failing", "unknown"]


class Problem(BaseModel):
    """Something to act on (or, among ``warnings``, to look at): a stable code and one line."""

    code: str
    message: str


class EngineStatus(BaseModel):
    url: str
    reachable: bool
    version: str | None = None
    api_version: str | None = None
    error: str | None = None


class ImageStatus(BaseModel):
    image: str
    #: ``unknown`` when the engine could not be asked (down), never guessed missing.
    state: ImageState
    #: Who names it: ``org policy`` or ``imp <name>``.
    used_by: list[str]
    detail: str | None = None


class ServeProcess(BaseModel):
    pid: int
    started_at: str | None
    concurrency: int | None
    once: bool
    version: str | None


class ServeSection(BaseModel):
    running: bool
    #: Live serves (usually one), oldest record first.
    processes: list[ServeProcess] = Field(default_factory=list)
    #: Pids of records left by serves that died without removing them.
    stale_pids: list[int] = Field(default_factory=list)


class QueueSection(BaseModel):
    counts: dict[str, int]
    oldest_queued_at: str | None = None
    error: str | None = None
    #: Another process held the database past status's short wait (``error`` says so).
    locked: bool = False


class RunningRun(BaseModel):
    run_id: str
    imp: str
    mode: str | None
    state: str
    task_id: str | None
    since: str | None
    age_seconds: float | None


class LeaseStatus(BaseModel):
    imp: str
    holder: str
    acquired_at: str
    heartbeat_age_seconds: float
    #: False: the holder stopped heartbeating; the next serve (or run) expires it.
    live: bool


class ImpKnowledge(BaseModel):
    imp: str
    main: str | None
    quarantines: int
    candidates: int
    error: str | None = None


class RemoteBackup(BaseModel):
    remote: str
    state: BackupState
    pushed_at: str | None = None
    pushed_main: str | None = None
    #: Commits on main not yet pushed (None: not known, e.g. never pushed).
    behind: int | None = None
    last_error: str | None = None
    failing_since: str | None = None
    attempts: int | None = None


class ImpBackup(BaseModel):
    imp: str
    remotes: list[RemoteBackup] = Field(default_factory=list)
    never_backed_up: bool = False


class BackupSection(BaseModel):
    #: How many ``[backup] remotes`` the deployed org policy names (never the locations:
    #: a URL may hold a password).
    configured_remotes: int
    status_file: str
    status_present: bool
    imps: list[ImpBackup] = Field(default_factory=list)
    error: str | None = None


class DiskUsage(BaseModel):
    name: str
    bytes: int
    #: False when the walk stopped at its entry or time budget (``bytes`` is then a floor).
    complete: bool


class DiskSection(BaseModel):
    path: str
    total_bytes: int
    free_bytes: int
    free_ratio: float
    min_free_ratio: float
    usage: list[DiskUsage] = Field(default_factory=list)
    error: str | None = None


class PolicySection(BaseModel):
    compiled_at: str | None
    #: sha256 of compiled.json (None: no readable policy is deployed).
    digest: str | None = None
    #: True when compiled.json reflects every policy file as it is now.
    deployed: bool
    changes: list[str] = Field(default_factory=list)
    #: What ``impyard deploy`` would refuse in the changed files, one line each
    #: (``<file>: line 3, column 5: not valid TOML: …``); empty when they compile.
    invalid: list[str] = Field(default_factory=list)


class ClusterNode(BaseModel):
    name: str
    state: str  # ready | drained | down
    runtimes: list[str]
    capacity: int
    boxes: int
    version: str
    last_heartbeat: str | None


class WarmPool(BaseModel):
    key: str
    image: str
    runtime: str
    ready: int
    #: Ready boxes the deployed policy asks for (the most any imp of the pool asks).
    wanted: int


class WarmSection(BaseModel):
    """Ready boxes now, and how the most recent finished runs that looked for one fared."""

    pools: list[WarmPool] = Field(default_factory=list)
    #: Finished runs looked at (the most recent ones, at most ``RECENT_RUNS``).
    recent_runs: int = 0
    hits: int = 0
    misses: int = 0
    claim_ms_p50: float | None = None
    claim_ms_p95: float | None = None

    @property
    def in_use(self) -> bool:
        return bool(self.pools or self.hits or self.misses)


class ClusterSection(BaseModel):
    enabled: bool
    nodes: list[ClusterNode] = Field(default_factory=list)


class Status(BaseModel):
    home: str
    generated_at: str
    engine: EngineStatus
    images: list[ImageStatus]
    serve: ServeSection
    queue: QueueSection
    runs: list[RunningRun]
    leases: list[LeaseStatus]
    knowledge: list[ImpKnowledge]
    backup: BackupSection
    disk: DiskSection
    policy: PolicySection
    cluster: ClusterSection = Field(default_factory=lambda: ClusterSection(enabled=False))
    warm: WarmSection = Field(default_factory=WarmSection)
    problems: list[Problem] = Field(default_factory=list)
    warnings: list[Problem] = Field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems
