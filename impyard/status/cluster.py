"""The cluster's nodes as ``impyard status``, the console and ``/metrics`` show them: none
unless ``[cluster] enabled``; else each node as serve last saw it."""

from __future__ import annotations

from impyard.cluster.view import node_rows
from impyard.home import Home
from impyard.policy.compile import deployed_org_policy
from impyard.status.model import ClusterNode, ClusterSection


def cluster_section(home: Home) -> ClusterSection:
    if not deployed_org_policy(home).cluster.enabled:
        return ClusterSection(enabled=False)
    nodes = [
        ClusterNode(
            name=str(row.get("name", "?")),
            state=str(row.get("state", "down")),
            runtimes=[str(r) for r in row.get("runtimes") or []],
            capacity=int(row.get("capacity") or 0),
            boxes=int(row.get("boxes") or 0),
            version=str(row.get("version", "")),
            last_heartbeat=row.get("last_heartbeat"),
        )
        for row in node_rows(home)
    ]
    return ClusterSection(enabled=True, nodes=nodes)
