"""Placement and the waits of remote runs: what the cluster API and the remote runs meet in.

A run is placed on the ready node with the most free room that has its runtime and its
image (a burst spreads over every node), and waits there until that node takes it. A lease
lives while its node's heartbeats name it with its token; it ends once, with the node's
result or as lost (the node fell silent, its agent restarted, it never took the run). A
message under any other token is refused, saying why: a node back after its lease expired
cannot land anything, let alone twice.
"""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

from impyard.box.watch.livelog import HeadTailWriter
from impyard.cluster.plane.leases import Lease
from impyard.cluster.plane.registry import Node, Registry
from impyard.cluster.plane.token import cluster_token
from impyard.cluster.protocol import (
    Assignment,
    BoxOrder,
    ExitReport,
    FileKind,
    HeartbeatAnswer,
    NodeReport,
    Started,
)
from impyard.common.errors import ImpyardError
from impyard.gateway.proxy.server import Gateway
from impyard.home import Home
from impyard.policy.cluster import ClusterPolicy

_REAP_EVERY_SECONDS = 0.5
#: The first line of a run's output as serve keeps it after it restarted mid-run.
RESTART_MARKER = b"[impyard: serve restarted while this box ran; its earlier output is not kept]\n"


class StaleLease(ImpyardError):
    """A node spoke about a run under a token that is not the run's live lease."""


class NoNode(ImpyardError):
    """No node could take the run."""


class Hub:
    def __init__(self, home: Home, policy: ClusterPolicy) -> None:
        self.home = home
        self.policy = policy
        self.token = cluster_token(home)
        self.registry = Registry(home, policy.lease_seconds)
        self.leases: dict[str, Lease] = {}
        #: The gateway of each remote run, for the box connections its node relays.
        self.gateways: dict[str, Gateway] = {}
        self.cond = threading.Condition()
        self._born = time.monotonic()
        self._stop = threading.Event()
        self._reaper = threading.Thread(target=self._reap, name="cluster-reaper", daemon=True)
        self._reaper.start()

    def close(self) -> None:
        """Stop; a lease still live is lost with serve (its run ends with serve's stop)."""
        self._stop.set()
        self._reaper.join(5)
        with self.cond:
            for lease in self.leases.values():
                self._lose(lease, "serve stopped")
        self.registry.save(force=True)

    # -- what nodes say ------------------------------------------------------------------

    def heartbeat(self, report: NodeReport, agent: str) -> HeartbeatAnswer:
        node, _previous = self.registry.report(report, agent)
        held = {run.run_id: run.token for run in report.runs}
        stop: list[str] = []
        with self.cond:
            for lease in self.leases.values():
                if lease.node != node.name or not lease.live or lease.state == "placed":
                    continue
                if lease.agent is None and lease.run_id in held:
                    lease.agent = agent  # a lease taken back after serve restarted
                if lease.agent != agent:
                    self._lose(lease, f"the node agent on {node.name} restarted")
                elif lease.run_id in held and lease.holds(held[lease.run_id]):
                    lease.renew(self.policy.lease_seconds)
            for run_id, token in held.items():
                known = self.leases.get(run_id)
                if known is None and time.monotonic() - self._born < self.policy.lease_seconds:
                    continue  # serve just restarted: its recovery may take the run back
                if known is None or not known.holds(token) or known.kill:
                    stop.append(run_id)
            node.runs = {x.run_id for x in self.leases.values() if x.node == node.name and x.live}
            self.cond.notify_all()  # placement may find room now
        self.registry.save()
        return HeartbeatAnswer(stop=stop, state=self.registry.state(node, self.registry.drained()))

    def take(self, node_name: str, agent: str, wait: float) -> Assignment | None:
        """The next run placed on this node, waiting up to ``wait`` seconds for one."""
        deadline = time.monotonic() + wait
        with self.cond:
            while True:
                with self.registry.lock:
                    known = self.registry.nodes.get(node_name)
                if known is None or known.agent != agent:
                    # Only the node's current agent takes runs: a poll left by an agent that
                    # died (and was replaced) would take a run nobody runs.
                    return None
                for lease in self.leases.values():
                    if lease.state == "placed" and lease.node == node_name:
                        lease.state, lease.agent = "taken", agent
                        lease.renew(self.policy.lease_seconds)
                        return lease.assignment()
                left = deadline - time.monotonic()
                if left <= 0 or self._stop.is_set():
                    return None
                self.cond.wait(min(left, 1.0))

    def untake(self, run_id: str, token: str) -> None:
        """The node never got the run it took (its connection broke): place it again."""
        with self.cond:
            lease = self.leases.get(run_id)
            if lease is not None and lease.state == "taken" and lease.holds(token):
                lease.state, lease.agent = "placed", None
                self.cond.notify_all()

    def file(self, run_id: str, token: str, kind: FileKind) -> Path:
        with self.cond:
            lease = self._held(run_id, token)
            path = lease.files.get(kind)
        if path is None:
            raise StaleLease(f"run {run_id} has no {kind} file")
        return path

    def started(self, run_id: str, message: Started) -> None:
        with self.cond:
            lease = self._held(run_id, message.token)
            with lease.changed:
                lease.state, lease.container_id = "started", message.container_id
                lease.changed.notify_all()

    def output(self, run_id: str, token: str, offset: int, data: bytes) -> int:
        """Append the box's output at ``offset``; the position the node should send next."""
        with self.cond:
            lease = self._held(run_id, token)
            if offset > lease.written:
                lease.written = offset  # what the node could not send in time is gone
            fresh = data[lease.written - offset :]
            if fresh:
                lease.log.write(fresh)
                lease.written += len(fresh)
            return lease.written

    def result(self, run_id: str, report: ExitReport, tree: Path | None) -> None:
        with self.cond:
            lease = self._held(run_id, report.token)
            lease.exit, lease.tree = report, tree
            with lease.changed:
                lease.end()

    def adopt(self, run_id: str, conn: socket.socket) -> bool:
        """Serve a relayed box connection on its run's gateway (its lease was checked)."""
        gateway = self.gateways.get(run_id)
        if gateway is None:
            conn.close()
            return False
        return gateway.adopt(conn)

    def gateway_for(self, run_id: str, token: str) -> str:
        """The run a relayed gateway connection belongs to, if its lease holds."""
        with self.cond:
            self._held(run_id, token)
        return run_id

    def _held(self, run_id: str, token: str) -> Lease:
        lease = self.leases.get(run_id)
        if lease is None:
            raise StaleLease(f"run {run_id} has no lease here")
        if not lease.holds(token):
            why = f" ({lease.lost})" if lease.lost else ""
            raise StaleLease(
                f"run {run_id}: this is not its current lease (the lease is {lease.state}{why})"
            )
        return lease

    # -- what remote runs ask ------------------------------------------------------------

    def place(
        self, run_id: str, imp: str, order: BoxOrder, files: dict[FileKind, Path], log: Path
    ) -> Lease:
        """Put the run on a node (waiting while every eligible node is full)."""
        lease = Lease(run_id=run_id, imp=imp, order=order, files=files, log=HeadTailWriter(log))
        waited_for_any = time.monotonic()
        with self.cond:
            while True:
                node, eligible = self._choose(order)
                if node is not None:
                    lease.node = node.name
                    lease.renew(self.policy.lease_seconds)
                    self.leases[run_id] = lease
                    node.runs.add(run_id)
                    self.cond.notify_all()
                    return lease
                if eligible:
                    waited_for_any = time.monotonic()
                elif time.monotonic() - waited_for_any > self.policy.lease_seconds:
                    lease.log.close()
                    raise NoNode(self._why_none(order))
                self.cond.wait(0.5)

    def resume(
        self, run_id: str, imp: str, node: str, token: str, container_id: str | None, log: Path
    ) -> Lease:
        """Take back the lease of a run placed before serve restarted: its node, still
        running the box, is heard under the same token within the lease length, or the run
        is lost."""
        writer = HeadTailWriter(log)
        writer.write(RESTART_MARKER)
        lease = Lease(
            run_id=run_id,
            imp=imp,
            order=None,
            files={},
            log=writer,
            node=node,
            token=token,
            state="started" if container_id else "taken",
            container_id=container_id,
        )
        lease.renew(self.policy.lease_seconds)
        with self.cond:
            self.leases[run_id] = lease
        return lease

    def _choose(self, order: BoxOrder) -> tuple[Node | None, bool]:
        drained = self.registry.drained()
        best: Node | None = None
        best_free = 0
        eligible = False
        with self.registry.lock:
            nodes = sorted(self.registry.nodes.values(), key=lambda n: n.name)
        for node in nodes:
            if self.registry.state(node, drained) != "ready":
                continue
            if order.runtime not in node.runtimes or order.image_id not in node.images:
                continue
            eligible = True
            held = sum(1 for x in self.leases.values() if x.node == node.name and x.live)
            free = node.capacity - held
            if free > best_free:
                best, best_free = node, free
        return best, eligible

    def _why_none(self, order: BoxOrder) -> str:
        rows = self.registry.rows()
        if not rows:
            return "no node of the cluster has reported (is `impyard cluster deploy` done?)"
        ready = [r for r in rows if r["state"] == "ready"]
        if not ready:
            return (
                "no node of the cluster is ready ("
                + ", ".join(f"{r['name']} {r['state']}" for r in rows)
                + ")"
            )
        return (
            f"no ready node has runtime {order.runtime} and image {order.image} "
            f"({order.image_id[:19]}); load it with `impyard cluster images`"
        )

    def wait(self, lease: Lease, until: str, timeout: float) -> bool:
        """Until the lease is ``started`` (or ended) or ended; False at ``timeout``."""
        deadline = time.monotonic() + timeout
        with lease.changed:
            while (until == "started" and lease.state in ("placed", "taken")) or (
                until == "ended" and lease.live
            ):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                lease.changed.wait(min(left, 1.0))
        return True

    def lose(self, lease: Lease, why: str) -> None:
        with self.cond:
            self._lose(lease, why)

    def kill(self, run_id: str) -> bool:
        """Ask the run's node to stop its box (at the node's next heartbeat)."""
        with self.cond:
            lease = self.leases.get(run_id)
            if lease is None or not lease.live:
                return False
            lease.kill = True
            return True

    def forget(self, run_id: str) -> None:
        with self.cond:
            self.leases.pop(run_id, None)

    def _lose(self, lease: Lease, why: str) -> None:
        if not lease.live:
            return
        with lease.changed:
            lease.end(lost=why)
        self.cond.notify_all()

    def _reap(self) -> None:
        while not self._stop.wait(_REAP_EVERY_SECONDS):
            now = time.monotonic()
            with self.cond:
                for lease in list(self.leases.values()):
                    if lease.live and now > lease.expires:
                        silent = (
                            "did not take the run" if lease.state == "placed" else "fell silent"
                        )
                        self._lose(
                            lease,
                            f"node {lease.node} {silent} for {self.policy.lease_seconds:g} s "
                            "(lease expired)",
                        )
