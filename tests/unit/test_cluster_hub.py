"""The control plane's leases without an engine: placement, fencing, loss."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from impyard.cluster.plane.hub import Hub, StaleLease
from impyard.cluster.plane.registry import set_drained
from impyard.cluster.protocol import BoxOrder, ExitReport, HeldRun, NodeReport, Started
from impyard.home import Home
from impyard.policy.cluster import ClusterPolicy

IMAGE = "sha256:" + "a" * 64


def _order() -> BoxOrder:
    return BoxOrder(
        name="b",
        image="impyard-box:latest",
        image_id=IMAGE,
        command=["true"],
        entrypoint=None,
        user="65532:65532",
        env={},
        mounts=[],
        memory_bytes=1 << 30,
        cpus=1.0,
        pids_limit=64,
        runtime="runc",
        timeout_seconds=60,
        gateway_port=None,
    )


def _report(
    node: str, *held: HeldRun, capacity: int = 2, engine_error: str | None = None
) -> NodeReport:
    return NodeReport(
        node=node,
        version="t",
        runtimes=["runc"],
        capacity=capacity,
        images=[] if engine_error else [IMAGE],
        runs=list(held),
        engine_error=engine_error,
    )


@pytest.fixture
def hub(tmp_path: Path) -> Hub:
    home = Home(tmp_path / "home")
    home.root.mkdir()
    (home.root / "runs").mkdir()
    made = Hub(home, ClusterPolicy(enabled=True, lease_seconds=3))
    yield made
    made.close()


def _place(hub: Hub, run_id: str):  # type: ignore[no-untyped-def]
    (hub.home.root / "runs" / run_id).mkdir(exist_ok=True)
    return hub.place(run_id, "ada", _order(), {}, hub.home.root / "runs" / run_id / "box.log")


def test_a_burst_spreads_over_the_nodes_with_room(hub: Hub) -> None:
    hub.heartbeat(_report("a"), "agent-a")
    hub.heartbeat(_report("b"), "agent-b")
    placed = [_place(hub, f"r{i}").node for i in range(4)]
    assert sorted(placed) == ["a", "a", "b", "b"]


def test_a_drained_node_gets_no_new_run(hub: Hub) -> None:
    hub.heartbeat(_report("a"), "agent-a")
    hub.heartbeat(_report("b"), "agent-b")
    set_drained(hub.home, "a", True)
    assert {_place(hub, f"r{i}").node for i in range(2)} == {"b"}


def test_a_node_whose_engine_does_not_answer_is_down_and_gets_no_run(hub: Hub) -> None:
    hub.heartbeat(_report("a"), "agent-a")
    hub.heartbeat(_report("b"), "agent-b")
    hub.heartbeat(_report("a", engine_error="connection refused"), "agent-a")
    rows = {r["name"]: r for r in hub.registry.rows()}
    assert rows["a"]["state"] == "down" and rows["a"]["engine_error"] == "connection refused"
    assert rows["b"]["state"] == "ready"
    assert {_place(hub, f"r{i}").node for i in range(2)} == {"b"}
    hub.heartbeat(_report("a"), "agent-a")  # its engine is back
    assert {r["name"]: r["state"] for r in hub.registry.rows()}["a"] == "ready"
    assert _place(hub, "r2").node == "a"


def test_only_the_current_lease_speaks_for_a_run(hub: Hub) -> None:
    hub.heartbeat(_report("a"), "agent-a")
    lease = _place(hub, "r1")
    taken = hub.take("a", "agent-a", 1)
    assert taken is not None and taken.token == lease.token
    with pytest.raises(StaleLease, match="not its current lease"):
        hub.started("r1", Started(token="forged", container_id="c"))
    hub.started("r1", Started(token=lease.token, container_id="c"))
    report = ExitReport(
        token=lease.token,
        exit_code=0,
        oom_killed=False,
        timed_out=False,
        container_id="c",
        image_id=IMAGE,
    )
    hub.result("r1", report, None)
    with pytest.raises(StaleLease, match="the lease is done"):
        hub.result("r1", report, None)  # a second result never counts


def test_a_silent_node_loses_its_runs_and_its_late_word_is_refused(hub: Hub) -> None:
    hub.heartbeat(_report("a"), "agent-a")
    lease = _place(hub, "r1")
    assert hub.take("a", "agent-a", 1) is not None
    assert hub.wait(lease, "ended", 10)
    assert lease.state == "lost" and "fell silent" in (lease.lost or "")
    answer = hub.heartbeat(_report("a", HeldRun(run_id="r1", token=lease.token)), "agent-a")
    assert answer.stop == ["r1"]  # the node is told to stop the box
    with pytest.raises(StaleLease, match="lease is lost"):
        hub.started("r1", Started(token=lease.token, container_id="c"))


def test_a_restarted_agent_loses_what_the_old_one_held(hub: Hub) -> None:
    hub.heartbeat(_report("a"), "agent-1")
    lease = _place(hub, "r1")
    assert hub.take("a", "agent-1", 1) is not None
    hub.heartbeat(_report("a"), "agent-2")
    assert lease.state == "lost" and "restarted" in (lease.lost or "")


def test_with_no_node_a_run_waits_the_lease_length_then_says_why(hub: Hub) -> None:
    from impyard.cluster.plane.hub import NoNode

    started = time.monotonic()
    with pytest.raises(NoNode, match="no node of the cluster has reported"):
        _place(hub, "r1")
    assert time.monotonic() - started >= 3
