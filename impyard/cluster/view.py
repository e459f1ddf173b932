"""The cluster as another process sees it: the nodes serve last wrote, each node's state
judged again by the age of its last heartbeat (a stopped serve's view goes ``down``), and
which of the images the imps need each node holds."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from impyard.cluster.plane.registry import read_drained, read_nodes
from impyard.home import Home
from impyard.policy.compile import deployed_org_policy


def node_rows(home: Home) -> list[dict[str, Any]]:
    policy = deployed_org_policy(home).cluster
    data = read_nodes(home) or {}
    drained = read_drained(home)
    now = datetime.now(UTC)
    rows = []
    for row in data.get("nodes") or []:
        if not isinstance(row, dict):
            continue
        row = dict(row)
        seen = _parse(row.get("last_heartbeat"))
        if seen is None or (now - seen).total_seconds() > policy.lease_seconds:
            row["state"], row["boxes"], row["runs"] = "down", 0, []
        elif row.get("engine_error"):
            row["state"] = "down"
        elif row.get("name") in drained:
            row["state"] = "drained"
        elif row.get("state") == "drained":
            row["state"] = "ready"
        rows.append(row)
    return rows


def _parse(text: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return None


def image_rows(home: Home, nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every image a run of this data root may use, the nodes that hold it and those that
    do not (by image id: the same name on a node may be another build)."""
    from impyard.box.docker.engine import api
    from impyard.common.errors import ImpyardError
    from impyard.knowledge.imps import list_imps, read_imp_settings

    policy = deployed_org_policy(home)
    wanted = {policy.box.image, policy.cluster.node_image}
    for imp in list_imps(home):
        image = read_imp_settings(home, imp).image
        if image:
            wanted.add(image)
    rows = []
    for image in sorted(wanted):
        try:
            image_id: str | None = str(api().inspect_image(image)["Id"])
        except ImpyardError:
            image_id = None
        held = [n["name"] for n in nodes if image_id and image_id in (n.get("images") or [])]
        rows.append(
            {
                "image": image,
                "id": image_id,
                "on": held,
                "missing": [n["name"] for n in nodes if n["name"] not in held],
            }
        )
    return rows
