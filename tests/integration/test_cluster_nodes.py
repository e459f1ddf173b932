"""serve as a cluster's control plane, with real node agents (``impyard node``) on this
host's engine: placement, the relayed gateway, leases and their fencing, hostile nodes."""

from __future__ import annotations

import io
import json
import signal
import tarfile
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.cli import Cli
from tests.helpers.cluster import enable_cluster, host_nodes, wait_for
from tests.integration.test_serve import (
    add_task,
    assert_linear_and_clean,
    make_yard,
    records,
    repo,
    serve_process,
    tasks_json,
)

pytestmark = pytest.mark.docker


def _runs(cli: Cli) -> list[dict[str, Any]]:
    return json.loads(cli("runs", "list", "--json").stdout)  # type: ignore[no-any-return]


def _show(cli: Cli, run_id: str) -> dict[str, Any]:
    return json.loads(cli("runs", "show", run_id, "--json").stdout)  # type: ignore[no-any-return]


def test_tasks_spread_over_the_nodes_and_land_once(cli: Cli) -> None:
    make_yard(cli, "ada", "bo", "cy")
    url = enable_cluster(cli)
    for i in range(12):
        add_task(cli, ("ada", "bo", "cy")[i % 3], f"cluster note number {i}")
    with host_nodes(cli, "node-a", "node-b", url=url) as nodes:
        serve = serve_process(cli, "--once", "--concurrency", "4")
        out, err = serve.communicate(timeout=300)
        status = {n["name"]: n for n in nodes.status()}
        overall = json.loads(cli("status", "--json").stdout)
    assert serve.returncode == 0, out + err
    assert overall["cluster"]["enabled"] is True
    assert sorted(n["name"] for n in overall["cluster"]["nodes"]) == ["node-a", "node-b"]
    assert status["node-a"]["state"] == status["node-b"]["state"] == "ready"
    assert {"runc"} <= set(status["node-a"]["runtimes"])
    assert status["node-a"]["capacity"] == 2
    assert [t["state"] for t in tasks_json(cli)] == ["done"] * 12
    runs = _runs(cli)
    assert len(runs) == 12 and {r["checkpoint"] for r in runs} == {"integrated"}
    on = Counter(_show(cli, r["run_id"])["node"] for r in runs)
    assert set(on) == {"node-a", "node-b"}, on
    for imp in ("ada", "bo", "cy"):
        assert len(records(cli, imp)) == 4
        assert_linear_and_clean(repo(cli, imp))
    # The checkout packed for a node is not kept once the node has it.
    assert not list((cli.home / "runs").glob("*/checkout.tar"))


# Asks the run's gateway for a check, then writes the demo imp's note.
CHECK_THEN_NOTE = 'impyard-check; echo "check exit $?"; exec /opt/impyard/bin/imp'


def test_a_box_on_a_node_reaches_its_gateway_here_through_the_relay(cli: Cli) -> None:
    make_yard(cli, "ada", command=CHECK_THEN_NOTE)
    url = enable_cluster(cli)
    add_task(cli, "ada", "check from afar")
    with host_nodes(cli, "node-a", url=url):
        serve = serve_process(cli, "--once")
        out, err = serve.communicate(timeout=120)
    assert serve.returncode == 0, out + err
    (run,) = _runs(cli)
    log = cli("runs", "logs", run["run_id"]).stdout
    # The answer came from this run's gateway on the control plane, relayed by the node.
    # Refused by this run's gateway on the control plane (a box on a node is checked at its
    # exit), reached through the node's relay: without it the box's connection fails.
    assert "409 Conflict" in log and "check exit 2" in log, log
    assert run["checkpoint"] == "integrated"
    journal = [json.loads(line) for line in (cli.home / "journal.jsonl").read_text().splitlines()]
    assert any(e.get("event") == "box.started" and e.get("node") == "node-a" for e in journal), (
        "the journal names the node"
    )


SLEEPER = "sleep 8; exec /opt/impyard/bin/imp"


def test_a_node_that_returns_after_its_lease_expired_is_refused(cli: Cli) -> None:
    make_yard(cli, "ada", command=SLEEPER)
    url = enable_cluster(cli, lease_seconds=3)
    add_task(cli, "ada", "sleep through a silence")
    with host_nodes(cli, "node-a", url=url) as nodes:
        serve = serve_process(cli)  # stays up: the node's late result must reach it
        wait_for("the box to start", lambda: "running" in {r["state"] for r in _runs(cli)})
        nodes.kill("node-a", signal.SIGSTOP)  # silent: no heartbeat, the box keeps running
        run_id = _runs(cli)[0]["run_id"]
        wait_for("the run to end lost", lambda: _show(cli, run_id)["state"] == "finished")
        nodes.kill("node-a", signal.SIGCONT)
        wait_for(
            "the node to hear its result refused",
            lambda: "refused or lost it" in nodes.log("node-a"),
            seconds=60,
        )
        wait_for(
            "the task to run again", lambda: tasks_json(cli)[0]["state"] == "done", seconds=120
        )
        serve.send_signal(signal.SIGTERM)
        serve.communicate(timeout=120)
    shown = _show(cli, run_id)
    assert shown["checkpoint"] == "quarantined"
    assert "lease expired" in (shown["reason"] or ""), shown["reason"]
    assert tasks_json(cli)[0]["checkpoint"] == "integrated"  # its second run
    assert "not its current lease (the lease is lost (node node-a fell silent" in nodes.log(
        "node-a"
    )
    assert len(records(cli, "ada")) == 1  # the late result never landed; the rerun did


def _hostile_tar(entries: list[tuple[str, str, bytes]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, kind, data in entries:
            info = tarfile.TarInfo(name)
            if kind == "symlink":
                info.type, info.linkname = tarfile.SYMTYPE, data.decode()
                tar.addfile(info)
            elif kind == "dir":
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _hostile_node_returns(
    cli: Cli, tmp_path: Path, entries: list[tuple[str, str, bytes]]
) -> tuple[str, Exception | None]:
    """A node that takes a run and returns ``entries`` as its tree (written here, not by a
    box): the run's id and how the control plane answered."""
    from impyard.box.docker import engine
    from impyard.box.docker.runtime import engine_runtimes
    from impyard.cluster.node.client import ClusterCallError, ClusterClient
    from impyard.cluster.plane.token import cluster_token
    from impyard.cluster.protocol import Assignment, ExitReport, NodeReport, Started
    from impyard.home import Home

    make_yard(cli, "ada")
    url = enable_cluster(cli)
    client = ClusterClient(url, cluster_token(Home(cli.home)), "hostile-agent")
    add_task(cli, "ada", "a tree from a hostile node")
    serve = serve_process(cli, "--once")
    report = NodeReport(
        node="evil",
        version="0",
        runtimes=engine_runtimes(),
        capacity=1,
        images=engine.api().image_ids(),
    )

    def leased() -> Assignment | None:
        try:
            client.call("POST", "/heartbeat", report)
            answer = client.call("POST", "/lease", {"node": "evil", "wait": 1})
        except ClusterCallError:  # serve is still starting
            return None
        return Assignment.model_validate(answer) if answer else None

    assignment = wait_for("a lease", leased)
    client.call(
        "POST",
        f"/runs/{assignment.run_id}/started",
        Started(token=assignment.token, container_id="0" * 64),
    )
    tree = tmp_path / "tree.tar"
    tree.write_bytes(_hostile_tar(entries))
    exit_report = ExitReport(
        token=assignment.token,
        exit_code=0,
        oom_killed=False,
        timed_out=False,
        container_id="0" * 64,
        image_id=assignment.box.image_id,
    )
    answer: Exception | None = None
    try:
        client.result(assignment.run_id, exit_report, tree)
    except ClusterCallError as exc:
        answer = exc
    serve.communicate(timeout=120)
    return assignment.run_id, answer


@pytest.mark.parametrize(
    ("entries", "said"),
    [
        ([("../escape.md", "file", b"x")], "leaves the tree"),
        (
            [
                ("records", "dir", b""),
                ("records/link", "symlink", b"/etc"),
                ("records/link/passwd", "file", b"x"),
            ],
            "under a symlink",
        ),
    ],
    ids=["dotdot", "through-symlink"],
)
def test_a_hostile_node_tree_is_refused_whole(
    cli: Cli, tmp_path: Path, entries: list[tuple[str, str, bytes]], said: str
) -> None:
    from impyard.cluster.node.client import ClusterCallError

    run_id, answer = _hostile_node_returns(cli, tmp_path, entries)
    assert isinstance(answer, ClusterCallError), answer
    assert answer.status == 422 and said in str(answer)
    shown = _show(cli, run_id)
    assert shown["checkpoint"] == "quarantined" and said in shown["reason"], shown["reason"]
    assert records(cli, "ada") == []
    assert not (cli.home.parent / "escape.md").exists()


@pytest.mark.parametrize(
    ("entries", "rule"),
    [
        ([(".git", "dir", b""), (".git/config", "file", b"[core]\n")], ".git"),
        ([("records", "dir", b""), ("records/passwd.md", "symlink", b"/etc/passwd")], "symlink"),
    ],
    ids=["dotgit", "symlink"],
)
def test_what_a_box_could_leave_meets_the_same_gate_as_a_local_box(
    cli: Cli, tmp_path: Path, entries: list[tuple[str, str, bytes]], rule: str
) -> None:
    run_id, answer = _hostile_node_returns(cli, tmp_path, entries)
    assert answer is None  # a tree a box could leave: taken, then judged
    shown = _show(cli, run_id)
    assert shown["checkpoint"] not in ("integrated", "empty"), shown
    errors = " ".join(
        f"{e['path']}: {e['rule']}: {e['message']}" for e in shown["validation_errors"]
    )
    assert rule in errors or rule in (shown["reason"] or ""), shown
    assert records(cli, "ada") == []


def test_a_restarted_node_agent_loses_its_runs_and_never_lands_them_twice(cli: Cli) -> None:
    make_yard(cli, "ada", command="sleep 6; exec /opt/impyard/bin/imp")
    url = enable_cluster(cli, lease_seconds=10)
    add_task(cli, "ada", "interrupted by its agent")
    with host_nodes(cli, "node-a", url=url) as nodes:
        serve = serve_process(cli, "--once")
        wait_for("the box to start", lambda: "running" in {r["state"] for r in _runs(cli)})
        nodes.kill("node-a")  # as Swarm would see a crashed task, and start a new one
        nodes.start("node-a")
        out, err = serve.communicate(timeout=120)
        nodes.ready("node-a")
    assert serve.returncode == 0, out + err
    # In the order they were created (a run id orders runs by the second only).
    lost, again = sorted(_runs(cli), key=lambda r: _show(cli, r["run_id"])["created_at"])
    shown = _show(cli, lost["run_id"])
    assert shown["checkpoint"] == "quarantined"
    assert "node agent on node-a restarted" in shown["reason"], shown["reason"]
    # A run lost with its node is not the task's fault: the task ran again, once.
    assert _show(cli, again["run_id"])["checkpoint"] == "integrated", _show(cli, again["run_id"])[
        "reason"
    ]
    assert [t["state"] for t in tasks_json(cli)] == ["done"]
    assert len(records(cli, "ada")) == 1  # landed once, never twice
    from impyard.box.launcher.launch import find_boxes

    assert find_boxes({"impyard.run": lost["run_id"]}) == []  # the new agent removed it


def test_a_drained_node_finishes_its_runs_and_gets_no_new_one(cli: Cli) -> None:
    make_yard(cli, "ada", command="sleep 3; exec /opt/impyard/bin/imp")
    url = enable_cluster(cli)
    with host_nodes(cli, "node-a", "node-b", url=url) as nodes:
        serve = serve_process(cli)
        nodes.ready("node-a", "node-b")
        add_task(cli, "ada", "first, on either node")
        wait_for("the first box", lambda: "running" in {r["state"] for r in _runs(cli)})
        (first,) = _runs(cli)
        busy = _show(cli, first["run_id"])["node"]
        other = "node-b" if busy == "node-a" else "node-a"
        drained = cli("cluster", "drain", busy, "--json")
        assert drained.code == 0 and json.loads(drained.stdout)["state"] == "drained"
        wait_for(
            "the drain", lambda: {n["name"]: n["state"] for n in nodes.status()}[busy] == "drained"
        )
        for i in range(3):
            add_task(cli, "ada", f"after the drain {i}")
        wait_for(
            "every run to end",
            lambda: len(_runs(cli)) == 4 and all(r["state"] == "finished" for r in _runs(cli)),
            seconds=120,
        )
        serve.send_signal(signal.SIGTERM)
        serve.communicate(timeout=60)
    nodes_of = {r["run_id"]: _show(cli, r["run_id"])["node"] for r in _runs(cli)}
    assert nodes_of.pop(first["run_id"]) == busy
    assert set(nodes_of.values()) == {other}
    assert {r["checkpoint"] for r in _runs(cli)} == {"integrated"}


def test_serve_restarted_mid_run_takes_the_remote_run_back(cli: Cli) -> None:
    make_yard(cli, "ada", command="sleep 6; exec /opt/impyard/bin/imp")
    url = enable_cluster(cli)
    add_task(cli, "ada", "outlives its control plane")
    with host_nodes(cli, "node-a", url=url) as nodes:
        first = serve_process(cli)
        wait_for("the box to start", lambda: "running" in {r["state"] for r in _runs(cli)})
        first.kill()  # the control plane dies; the node and its box go on
        first.communicate(timeout=30)
        second = serve_process(cli, "--once")
        out, err = second.communicate(timeout=120)
        log = nodes.log("node-a")
    assert second.returncode == 0, out + err
    (run,) = _runs(cli)
    shown = _show(cli, run["run_id"])
    assert shown["checkpoint"] == "integrated", shown["reason"]
    assert shown["node"] == "node-a"
    assert len(records(cli, "ada")) == 1, "landed once"
    assert "refused or lost" not in log, log
