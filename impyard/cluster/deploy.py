"""The node agent as a Swarm global service: one ``impyard node`` on every node, restarted
by Swarm when it dies, replaced when its spec changes; its cluster token as a Swarm secret.

The agent needs its node's engine (the socket), the host's /proc (a box's pid is the
host's: the relay listens inside the box's network namespace, as a local gateway does,
which takes CAP_SYS_ADMIN for setns and CAP_SYS_PTRACE to open another user's namespace),
the node's work directory at the same path (the boxes it starts bind-mount from there) and
the node's own network (``host``: it connects out to the control plane; it listens on
nothing). Swarm cannot start the boxes themselves: a service cannot have network ``none``,
no-new-privileges (before Engine 25), a runtime of its own or a second process in its
network namespace, so the agent starts them on its engine, with today's box spec.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from impyard.cluster.protocol import TOKEN_SECRET
from impyard.common.errors import ConfigError, EngineError
from impyard.policy.cluster import ClusterPolicy

SERVICE = "impyard-node"
LABEL = "impyard.cluster"


@dataclass(frozen=True)
class Deployed:
    service: str
    created: bool
    image: str
    secret: str
    url: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "service": self.service,
            "created": self.created,
            "image": self.image,
            "secret": self.secret,
            "url": self.url,
        }


def _client(policy: ClusterPolicy) -> Any:
    import docker
    from docker.errors import DockerException

    try:
        client = (
            docker.DockerClient(base_url=policy.manager) if policy.manager else docker.from_env()
        )
        client.ping()
    except DockerException as exc:
        where = policy.manager or "this host's engine"
        raise EngineError(f"cluster deploy: cannot reach {where}: {exc}") from exc
    return client


def deploy(policy: ClusterPolicy, token: str) -> Deployed:
    """Create or update the node service on the swarm whose manager ``policy`` names."""
    from docker.errors import APIError, NotFound
    from docker.types import EndpointSpec, Mount, RestartPolicy, SecretReference, ServiceMode

    client = _client(policy)
    try:
        swarm = client.info().get("Swarm") or {}
        if not swarm.get("ControlAvailable"):
            raise ConfigError(
                "cluster deploy: the engine is not a swarm manager "
                "(`docker swarm init` there, or set [cluster] manager)"
            )
        secret_name = f"{TOKEN_SECRET}-{hashlib.sha256(token.encode()).hexdigest()[:12]}"
        try:
            secret = client.secrets.get(secret_name)
        except NotFound:
            secret = client.secrets.create(
                name=secret_name, data=token.encode(), labels={LABEL: "token"}
            )
        spec: dict[str, Any] = {
            "image": policy.node_image,
            "args": ["node"],
            "name": SERVICE,
            "mode": ServiceMode("global"),
            "networks": ["host"],
            "env": [
                f"IMPYARD_CLUSTER_URL={policy.url()}",
                "IMPYARD_NODE_NAME={{.Node.Hostname}}",
                f"IMPYARD_NODE_WORK={policy.node_work_dir}",
                f"IMPYARD_NODE_CAPACITY={policy.runs_per_node}",
                "IMPYARD_HOST_PROC=/host/proc",
            ],
            "mounts": [
                Mount("/var/run/docker.sock", policy.node_engine_socket, type="bind"),
                Mount(policy.node_work_dir, policy.node_work_dir, type="bind"),
                Mount("/host/proc", "/proc", type="bind", read_only=True),
            ],
            "secrets": [SecretReference(secret.id, secret_name, filename=TOKEN_SECRET)],
            "cap_add": ["CAP_SYS_ADMIN", "CAP_SYS_PTRACE"],
            "restart_policy": RestartPolicy(condition="any", delay=1_000_000_000),
            "labels": {LABEL: "node"},
            "endpoint_spec": EndpointSpec(mode="dnsrr"),
        }
        try:
            service = client.services.get(SERVICE)
        except NotFound:
            client.services.create(**spec)
            created = True
        else:
            spec.pop("name")
            service.update(**spec, force_update=True)
            created = False
    except APIError as exc:
        raise EngineError(f"cluster deploy: {exc.explanation or exc}") from exc
    finally:
        client.close()
    return Deployed(SERVICE, created, policy.node_image, secret_name, policy.url())


def service_tasks(policy: ClusterPolicy) -> list[dict[str, Any]]:
    """The node service's tasks as Swarm reports them (node id, state, error)."""
    from docker.errors import NotFound

    client = _client(policy)
    try:
        try:
            service = client.services.get(SERVICE)
        except NotFound:
            return []
        return [
            {
                "node_id": task.get("NodeID"),
                "state": (task.get("Status") or {}).get("State"),
                "error": (task.get("Status") or {}).get("Err"),
            }
            for task in service.tasks()
        ]
    finally:
        client.close()
