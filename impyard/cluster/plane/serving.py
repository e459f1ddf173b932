"""The cluster inside ``impyard serve``: with ``[cluster] enabled`` every run serve admits
is placed on a node; the cluster API listens for the nodes until serve stops."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from impyard.cluster.plane.api import ClusterServer, start_server
from impyard.cluster.plane.hub import Hub
from impyard.cluster.plane.remote_run import RemoteRun
from impyard.common.errors import ConfigError
from impyard.home import Home
from impyard.policy.compile import deployed_org_policy
from impyard.policy.models import EffectivePolicy
from impyard.runs.drive.context import RunContext
from impyard.runs.drive.pipeline import Run
from impyard.runs.records.model import Manifest


@dataclass
class ClusterPlane:
    hub: Hub
    server: ClusterServer

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.hub.close()


def start_cluster(home: Home, ctx: RunContext) -> ClusterPlane | None:
    """Start the cluster API and route ``ctx``'s runs to nodes, when the policy says so."""
    policy = deployed_org_policy(home).cluster
    if not policy.enabled:
        return None
    hub = Hub(home, policy)
    try:
        server = start_server(hub, policy.listen, hub.adopt)
    except OSError as exc:
        hub.close()
        raise ConfigError(f"[cluster] listen {policy.listen}: cannot listen: {exc}") from exc

    def make_run(run_ctx: RunContext, manifest: Manifest, run_policy: EffectivePolicy) -> Any:
        # New runs go to the cluster; recovery finds runs of both kinds (a box that ran
        # here before the cluster was turned on ends here).
        if manifest.node is not None or manifest.state == "created":
            return RemoteRun(run_ctx, manifest, run_policy, hub)
        return Run(run_ctx, manifest, run_policy)

    ctx.make_run = make_run
    ctx.kill_remote = hub.kill
    ctx.requeue_lost = lambda manifest: requeue_lost(home, manifest)
    # A node gets the checkout as plain files: a copy, never an overlay of this host's layers.
    ctx.settings = ctx.settings.model_copy(update={"checkout": "copy"})
    return ClusterPlane(hub=hub, server=server)


#: How a run lost with its node ends (``RemoteRun``'s box error, in the manifest's reason).
LOST = "lost: "


def requeue_lost(home: Home, manifest: Manifest) -> bool:
    """A run lost with its node queues its task again, once: a second loss of the same
    task stays quarantined for the owner to look at."""
    if manifest.node is None or manifest.task_id is None or LOST not in (manifest.reason or ""):
        return False
    from impyard.runs.records import manifest as manifests

    losses = [
        m
        for m in manifests.list_all(home)
        if m.task_id == manifest.task_id and m.node is not None and LOST in (m.reason or "")
    ]
    return len(losses) == 1
