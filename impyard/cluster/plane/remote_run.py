"""A run whose box runs on a cluster node: the pipeline's run, with the box elsewhere.

Admission, the checkout, the gateway (with every route's secret), the journal and the
ending stay here, on the control plane. The node gets the box's order and its files (the
checkout made here, the published origin, the task, the CA bundle), starts the box with
the same hardening on its own engine, relays the box's gateway connections back to this
run's gateway, and returns the box's exit and its final tree. The tree replaces the
checkout's files, and the run ends as a local one does: the same snapshot, gate and lane.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from impyard.box.images.trust import BOX_CA_BUNDLE
from impyard.box.spec import BoxExit, BoxSpec
from impyard.cluster.plane.hub import Hub
from impyard.cluster.plane.leases import Lease
from impyard.cluster.protocol import MAX_TREE_BYTES, BoxOrder, FileKind, MountKind, OrderMount
from impyard.cluster.treetar import TreeRefused, TreeTooLarge, pack, unpack
from impyard.common import names
from impyard.common.errors import ImpyardError
from impyard.common.fsutil import remove_tree
from impyard.gateway.proxy.control import ControlRefused
from impyard.gateway.wiring.boxside import BOX_SIGNAL_DIR
from impyard.knowledge.checkouts.checkout import forget_identities
from impyard.policy.models import EffectivePolicy
from impyard.runs.checkpoints.control import BoxControl
from impyard.runs.drive.context import RunContext
from impyard.runs.drive.pipeline import Run
from impyard.runs.provision.boxspec import BOX_KNOWLEDGE, BOX_ORIGIN, BOX_TASK, box_spec
from impyard.runs.records.model import Manifest, RunRequest

#: The longest a checkout may be when it is packed for a node.
_MAX_PACKED = 1 << 30
#: How long past the box's own timeout a node may take to return its result.
_RESULT_GRACE_SECONDS = 60.0


class RemoteLost(ImpyardError):
    """The run's node never started its box."""


class RemoteBoxControl(BoxControl):
    """The control API of a box on a node: its tree is read here only once it returned."""

    def check(self) -> dict[str, Any]:
        raise ControlRefused(409, self._why())

    def checkpoint(self) -> dict[str, Any]:
        raise ControlRefused(409, self._why())

    def _why(self) -> str:
        node = self.run.manifest.node or "a cluster node"
        return f"this box runs on {node}: its tree is checked and checkpointed when it exits"


class RemoteRun(Run):
    def __init__(
        self, ctx: RunContext, manifest: Manifest, policy: EffectivePolicy, hub: Hub
    ) -> None:
        super().__init__(ctx, manifest, policy)
        self.hub = hub
        self.lease: Lease | None = None
        self.gateway.control_type = RemoteBoxControl

    def start_box(self, request: RunRequest) -> None:
        self.gateway.prepare()
        spec = box_spec(self.home, self.manifest, self.policy, request)
        self.manifest.starting(spec.name, spec.image)
        self.save()
        with self._starting():
            with self.phase("start"):
                files = self._files(spec)
                assert self.image_id is not None, "resolved while the run prepared"
                order = box_order(spec, self.image_id, self._gateway_port())
                self.gateway.open()
                if self.gateway.gateway is not None:
                    self.hub.gateways[self.manifest.run_id] = self.gateway.gateway
                log_path = self.home.box_log(self.manifest.run_id)
                lease = self.hub.place(
                    self.manifest.run_id, self.manifest.imp, order, files, log_path
                )
                self.lease = lease
                self.manifest.node, self.manifest.node_lease = lease.node, lease.token
                self.save()
                self.event("box.placed", node=lease.node)
                self.hub.wait(lease, "started", float("inf"))
            # A box that started and already returned has ended its lease: it still started.
            if lease.container_id is None:
                why = lease.lost or (lease.exit.error if lease.exit else None) or lease.state
                raise RemoteLost(f"node {lease.node} did not start the box: {why}")
        self.manifest.running(lease.container_id, self.image_id, names.utc_now())
        self.save()
        self.event(
            "box.started",
            container=lease.container_id,
            image=spec.image,
            runtime=spec.runtime,
            node=lease.node,
        )
        if self.ctx.on_box_started is not None:
            self.ctx.on_box_started(self.manifest)

    @contextlib.contextmanager
    def _starting(self) -> Iterator[None]:
        """The packed checkout is gone once the node started the box (or never will), and
        a box that did not start leaves no gateway here for a node to relay to."""
        try:
            yield
        except BaseException:
            self.hub.gateways.pop(self.manifest.run_id, None)
            raise
        finally:
            self._packed_checkout().unlink(missing_ok=True)

    def _packed_checkout(self) -> Path:
        return self.home.run_dir(self.manifest.run_id) / "checkout.tar"

    def _gateway_port(self) -> int | None:
        return self.policy.gateway.port if self.policy.gateway.enabled else None

    def _files(self, spec: BoxSpec) -> dict[FileKind, Path]:
        files: dict[FileKind, Path] = {
            "task": self.home.run_task(self.manifest.run_id),
            # Synced to the node's own copy when it asks, less what that copy holds.
            "origin": self.home.origin(self.manifest.imp),
        }
        if self.manifest.checkout is not None:
            archive = self._packed_checkout()
            with open(archive, "wb") as out:
                pack(Path(self.manifest.checkout.root), out, _MAX_PACKED)
            files["checkout"] = archive
        bundle = self.home.run_ca_bundle(self.manifest.run_id)
        if bundle.exists():
            files["ca"] = bundle
        return files

    def resume(self, timeout_seconds: float) -> BoxExit:
        """After serve restarted: hear the run's node again under its lease, and end the
        run with what it returns (or as lost)."""
        m = self.manifest
        assert m.node is not None
        self.gateway.open()
        if self.gateway.gateway is not None:
            self.hub.gateways[m.run_id] = self.gateway.gateway
        self.lease = self.hub.resume(
            m.run_id,
            m.imp,
            m.node,
            m.node_lease or "",
            m.container_id,
            self.home.box_log(m.run_id),
        )
        self.event("box.resumed", node=m.node)
        if m.container_id and self.ctx.on_box_started is not None:
            self.ctx.on_box_started(m)
        try:
            return self.wait_box(max(timeout_seconds, 0.0))
        finally:
            self.gateway.close()

    def wait_box(self, timeout_seconds: float) -> BoxExit:
        lease = self.lease
        assert lease is not None
        with self.phase("box"):
            limit = timeout_seconds + self.hub.policy.lease_seconds + _RESULT_GRACE_SECONDS
            if not self.hub.wait(lease, "ended", limit):
                self.hub.lose(lease, f"no result {limit:g} s after the box started")
        self.remove_box_and_volume()
        return self._box_exit(lease)

    def _box_exit(self, lease: Lease) -> BoxExit:
        report = lease.exit
        kept = lease.kept_log
        error: str | None
        if report is None:
            error = f"lost: {lease.lost}"  # serving.LOST: a lost run's task is queued again
        else:
            error = report.error or report.tree_error or self._take_tree(lease.tree)
        return BoxExit(
            exit_code=report.exit_code if report else -1,
            oom_killed=report.oom_killed if report else False,
            timed_out=report.timed_out if report else False,
            error=error,
            container_id=lease.container_id or "",
            image_id=report.image_id if report else (self.image_id or ""),
            started_at=report.started_at if report else None,
            finished_at=report.finished_at if report else None,
            log_bytes=kept.kept_bytes if kept else 0,
            log_truncated=kept.truncated if kept else False,
        )

    def _take_tree(self, archive: Path | None) -> str | None:
        """The returned tree in place of the checkout's files; why not, if it cannot be."""
        checkout = self.manifest.checkout
        if checkout is None:
            return None
        if archive is None:
            return "the node returned no tree"
        root = Path(checkout.root)
        try:
            for entry in os.scandir(root):
                if entry.is_dir(follow_symlinks=False):
                    remove_tree(Path(entry.path))
                else:
                    os.unlink(entry.path)
            unpack(archive, root, min(self.limits.max_repo_bytes, MAX_TREE_BYTES))
            forget_identities(checkout)
        except (TreeRefused, TreeTooLarge) as exc:
            return str(exc)
        finally:
            archive.unlink(missing_ok=True)
        return None

    def remove_box_and_volume(self) -> None:
        # The node removes its box; what is left here is the run's own.
        self.hub.gateways.pop(self.manifest.run_id, None)
        self.checkout.drop_volume()


def box_order(spec: BoxSpec, image_id: str, gateway_port: int | None) -> BoxOrder:
    """The box's order for a node: the spec as it is, each mount named by what it holds."""
    by_target: dict[str, MountKind] = {
        BOX_KNOWLEDGE: "checkout",
        BOX_ORIGIN: "origin",
        BOX_TASK: "task",
        BOX_CA_BUNDLE: "ca",
        BOX_SIGNAL_DIR: "signal",
    }
    mounts: list[OrderMount] = []
    for mount in spec.mounts:
        kind = by_target.get(mount.target)
        if kind is None:
            raise ValueError(f"a box mount a node cannot make: {mount.target}")
        mounts.append(OrderMount(kind=kind, target=mount.target, read_only=mount.read_only))
    return BoxOrder(
        name=spec.name or f"impyard-{spec.run_id}",
        image=spec.image,
        image_id=image_id,
        command=list(spec.command),
        entrypoint=list(spec.entrypoint) if spec.entrypoint else None,
        user=spec.user,
        env=dict(spec.env),
        mounts=mounts,
        memory_bytes=spec.memory_bytes,
        cpus=spec.cpus,
        pids_limit=spec.pids_limit,
        runtime=spec.runtime,
        timeout_seconds=spec.timeout_seconds,
        gateway_port=gateway_port,
    )
