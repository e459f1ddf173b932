"""The cluster API's messages and paths. Every request carries the cluster token
(``Authorization: Bearer``); every message about a run carries the lease's fencing token,
and the control plane accepts it only for that run's current lease."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

#: The API version every path starts with.
API = "/v1"
#: The Swarm secret holding the cluster token, and where a service task finds it.
TOKEN_SECRET = "impyard-cluster-token"
TOKEN_FILE = f"/run/secrets/{TOKEN_SECRET}"
#: The Upgrade protocol of one relayed gateway connection.
RELAY_PROTOCOL = "impyard-relay"
#: A node name: Swarm's hostname of the node (letters, digits, dots, dashes).
NODE_NAME = r"^[A-Za-z0-9][A-Za-z0-9.-]{0,62}$"
#: The largest tree a node may return, whatever the run's limits say (a bound on memory
#: and disk before the limits are read).
MAX_TREE_BYTES = 512 * 1024 * 1024

NodeState = Literal["ready", "drained", "down"]
FileKind = Literal["checkout", "origin", "task", "ca"]
MountKind = Literal["checkout", "origin", "task", "ca", "signal"]


class _Message(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class HeldRun(_Message):
    run_id: str = Field(pattern=r"^[A-Za-z0-9_-]{1,80}$")
    token: str = Field(min_length=1, max_length=120)


class NodeReport(_Message):
    """A node's heartbeat: who it is, what it can run, what it runs now."""

    node: str = Field(pattern=NODE_NAME)
    version: str = Field(max_length=60)
    runtimes: list[str] = Field(max_length=16)
    capacity: int = Field(ge=0, le=256)
    images: list[str] = Field(default_factory=list, max_length=512)
    runs: list[HeldRun] = Field(default_factory=list, max_length=256)
    #: Why the node's own engine does not answer (its boxes' containers may outlive it and
    #: so may this agent): no run is placed on the node until it answers again.
    engine_error: str | None = Field(default=None, max_length=500)


class HeartbeatAnswer(_Message):
    #: Runs the node holds whose lease is gone (expired, superseded, killed): stop them.
    stop: list[str] = Field(default_factory=list)
    state: NodeState = "ready"


class OrderMount(_Message):
    """A mount of the box, by what it holds; the node puts the file there itself."""

    kind: MountKind
    target: str
    read_only: bool


class BoxOrder(_Message):
    """The box a node starts: exactly what a local box would get, paths aside."""

    name: str
    image: str
    image_id: str
    command: list[str]
    entrypoint: list[str] | None
    user: str
    env: dict[str, str]
    mounts: list[OrderMount]
    memory_bytes: int
    cpus: float
    pids_limit: int
    runtime: Literal["runc", "runsc"]
    timeout_seconds: float
    gateway_port: int | None


class Assignment(_Message):
    run_id: str = Field(pattern=r"^[A-Za-z0-9_-]{1,80}$")
    imp: str = Field(pattern=r"^[a-z][a-z0-9-]{0,31}$")  # names a directory on the node
    token: str
    box: BoxOrder


class Started(_Message):
    token: str
    container_id: str


class ExitReport(_Message):
    """How the box ended, as the node's engine said; the tree follows as the body."""

    token: str
    exit_code: int
    oom_killed: bool
    timed_out: bool
    error: str | None = Field(default=None, max_length=5000)
    container_id: str = Field(max_length=80)
    image_id: str = Field(max_length=100)
    started_at: str | None = Field(default=None, max_length=40)
    finished_at: str | None = Field(default=None, max_length=40)
    #: The tree could not be packed (too large, unreadable): the run is quarantined.
    tree_error: str | None = Field(default=None, max_length=5000)


class Refusal(_Message):
    """Why the control plane refused a message (every reason)."""

    error: str
    reasons: list[str] = Field(default_factory=list)
