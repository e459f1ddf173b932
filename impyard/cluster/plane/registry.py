"""The nodes as they report themselves. A node is ``ready`` while its heartbeats arrive
within the lease length and the owner has not drained it, ``drained`` when the owner has
(its runs finish; it gets no new one), ``down`` when it fell silent or its engine does not
answer. ``nodes.json`` holds the last view for ``impyard cluster status`` and ``impyard
status`` in other processes; ``drained.json`` is the owner's, read on every placement so a
drain applies at once."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from impyard.cluster.protocol import NodeReport, NodeState
from impyard.common import names
from impyard.common.fsutil import atomic_write_json
from impyard.home import Home

#: How often ``nodes.json`` is rewritten at most (heartbeats arrive every second or so).
_WRITE_EVERY_SECONDS = 2.0


@dataclass
class Node:
    name: str
    agent: str
    version: str
    runtimes: list[str]
    capacity: int
    images: set[str]
    seen: float  # monotonic
    seen_at: str
    runs: set[str] = field(default_factory=set)
    engine_error: str | None = None

    def row(self, state: NodeState) -> dict[str, Any]:
        return {
            "name": self.name,
            "state": state,
            "runtimes": sorted(self.runtimes),
            "capacity": self.capacity,
            "boxes": len(self.runs),
            "runs": sorted(self.runs),
            "images": sorted(self.images),
            "version": self.version,
            "last_heartbeat": self.seen_at,
            "engine_error": self.engine_error,
        }


class Registry:
    def __init__(self, home: Home, lease_seconds: float) -> None:
        self.home = home
        self.lease_seconds = lease_seconds
        self.lock = threading.Lock()
        self.nodes: dict[str, Node] = {}
        self._written = 0.0

    def report(self, report: NodeReport, agent: str) -> tuple[Node, str | None]:
        """Record a heartbeat; also the agent id the node had before, when it changed
        (the agent restarted: whatever the old one held is lost)."""
        now = time.monotonic()
        with self.lock:
            node = self.nodes.get(report.node)
            previous = node.agent if node is not None and node.agent != agent else None
            runs = node.runs if node is not None and previous is None else set()
            self.nodes[report.node] = Node(
                name=report.node,
                agent=agent,
                version=report.version,
                runtimes=list(report.runtimes),
                capacity=report.capacity,
                images=set(report.images),
                seen=now,
                seen_at=names.utc_now(),
                runs=runs,
                engine_error=report.engine_error,
            )
            return self.nodes[report.node], previous

    def state(self, node: Node, drained: set[str], now: float | None = None) -> NodeState:
        if node.engine_error or (now or time.monotonic()) - node.seen > self.lease_seconds:
            return "down"
        return "drained" if node.name in drained else "ready"

    def drained(self) -> set[str]:
        return read_drained(self.home)

    def rows(self) -> list[dict[str, Any]]:
        drained = self.drained()
        with self.lock:
            return [n.row(self.state(n, drained)) for n in sorted(self.nodes.values(), key=_name)]

    def save(self, force: bool = False) -> None:
        """Write ``nodes.json`` (at most every couple of seconds unless forced)."""
        now = time.monotonic()
        if not force and now - self._written < _WRITE_EVERY_SECONDS:
            return
        self._written = now
        self.home.cluster_dir.mkdir(mode=0o700, exist_ok=True)
        atomic_write_json(
            self.home.cluster_dir / "nodes.json",
            {"written_at": names.utc_now(), "nodes": self.rows()},
            durable=False,
        )


def _name(node: Node) -> str:
    return node.name


def read_drained(home: Home) -> set[str]:
    try:
        data = json.loads((home.cluster_dir / "drained.json").read_text())
    except (FileNotFoundError, ValueError):
        return set()
    return {str(n) for n in data} if isinstance(data, list) else set()


def set_drained(home: Home, node: str, drained: bool) -> bool:
    """Drain or activate ``node``; whether that changed anything."""
    current = read_drained(home)
    wanted = current | {node} if drained else current - {node}
    if wanted == current:
        return False
    home.cluster_dir.mkdir(mode=0o700, exist_ok=True)
    atomic_write_json(home.cluster_dir / "drained.json", sorted(wanted))
    return True


def read_nodes(home: Home) -> dict[str, Any] | None:
    """The nodes as serve last wrote them, or None when no serve ever ran a cluster."""
    try:
        data = json.loads((home.cluster_dir / "nodes.json").read_text())
    except (FileNotFoundError, ValueError):
        return None
    return data if isinstance(data, dict) else None
