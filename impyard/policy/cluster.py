"""``[cluster]``: whether serve places runs on the nodes of a Docker Swarm, and how.

Only the org file sets these (every key is ``fixed``): where a run's box runs is the host's
operation, not an imp's choice.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from impyard.policy.base import FIXED, _Strict

#: How long a node may stay silent before its runs are recorded lost.
DEFAULT_LEASE_SECONDS = 30.0


class ClusterPolicy(_Strict):
    enabled: Annotated[bool, FIXED] = Field(
        default=False,
        description="Place every run of `impyard serve` on a node of the cluster.",
    )
    listen: Annotated[str, Field(pattern=r"^[^\s:]+:\d{1,5}$"), FIXED] = Field(
        default="127.0.0.1:7480",
        description="host:port serve's cluster API listens on (node agents connect to it).",
    )
    advertise: Annotated[str | None, Field(pattern=r"^https?://[^\s]+$"), FIXED] = Field(
        default=None,
        description="The URL node agents reach the cluster API at (default http://<listen>).",
    )
    lease_seconds: Annotated[float, Field(ge=3, le=3600), FIXED] = Field(
        default=DEFAULT_LEASE_SECONDS,
        description="A node silent this long has its runs recorded lost.",
    )
    runs_per_node: Annotated[int, Field(ge=1, le=256), FIXED] = Field(
        default=2, description="How many runs one node takes at once."
    )
    manager: Annotated[str | None, Field(min_length=1), FIXED] = Field(
        default=None,
        description="Engine address of a swarm manager for `cluster deploy` (default: this host).",
    )
    node_image: Annotated[str, Field(min_length=1), FIXED] = Field(
        default="impyard-node:latest", description="The node agent's image."
    )
    node_engine_socket: Annotated[str, Field(pattern=r"^/"), FIXED] = Field(
        default="/var/run/docker.sock",
        description="Each node's engine socket ({{.Node.Hostname}} and other Swarm templates).",
    )
    node_work_dir: Annotated[str, Field(pattern=r"^/"), FIXED] = Field(
        default="/var/lib/impyard-node",
        description="Where a node keeps its runs' files (the same path on the node and its agent).",
    )

    def url(self) -> str:
        return self.advertise or f"http://{self.listen}"
