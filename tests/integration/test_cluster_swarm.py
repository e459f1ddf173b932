"""serve's runs on a two-node lab swarm: the node agent deployed by `impyard cluster
deploy` as a Swarm global service, boxes on each node's own engine with a local box's
hardening, reaching only their gateway; a node's engine killed mid-run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.cli import Cli
from tests.helpers.cluster import wait_for
from tests.helpers.swarm_lab import SwarmLab, lab_problem, swarm_lab
from tests.integration.test_serve import (
    add_task,
    assert_linear_and_clean,
    records,
    repo,
    serve_process,
)

pytestmark = pytest.mark.docker

#: What a box on a node tries before it writes its note: the control plane's API and the
#: other node's engine port directly (no proxy), then its own gateway.
PROBE = (
    "for target in 10.213.0.1:7480 10.213.0.11:2377 10.213.0.12:2377; do "
    'if http_proxy= HTTP_PROXY= wget -q -T 2 -O /dev/null "http://$target/" 2>/dev/null; '
    'then echo "reached $target"; else echo "blocked $target"; fi; done; '
    'echo "routes: $(tail -n +2 /proc/net/route | wc -l)"; '
    'impyard-check >/dev/null 2>&1; echo "gateway answered $?"; '
    "sleep 2; exec /opt/impyard/bin/imp"
)

#: What a box must look like on any engine, read from `docker inspect`.
HARDENING = (
    ("HostConfig", "CapDrop"),
    ("HostConfig", "CapAdd"),
    ("HostConfig", "Privileged"),
    ("HostConfig", "ReadonlyRootfs"),
    ("HostConfig", "SecurityOpt"),
    ("HostConfig", "NetworkMode"),
    ("HostConfig", "Tmpfs"),
    ("HostConfig", "Memory"),
    ("HostConfig", "NanoCpus"),
    ("HostConfig", "PidsLimit"),
    ("HostConfig", "Runtime"),
    ("Config", "User"),
    ("Config", "NetworkDisabled"),
)


def _hardening(inspect: dict[str, Any]) -> dict[str, Any]:
    return {f"{a}.{b}": inspect.get(a, {}).get(b) for a, b in HARDENING}


def _runs(cli: Cli) -> list[dict[str, Any]]:
    return json.loads(cli("runs", "list", "--json").stdout)  # type: ignore[no-any-return]


def _show(cli: Cli, run_id: str) -> dict[str, Any]:
    return json.loads(cli("runs", "show", run_id, "--json").stdout)  # type: ignore[no-any-return]


@pytest.fixture
def lab_home(tmp_path: Path) -> Path:
    problem = lab_problem()
    if problem is not None:
        pytest.skip(problem)
    return tmp_path / "home"


def _local_box_hardening(cli: Cli) -> dict[str, Any]:
    """A box of the same imp on this host's engine, as `impyard run` starts it."""
    # A command of its own: in this process, the detached driver's handle would be
    # collected while the driver still runs.
    detach = Cli(home=cli.home, in_process=False)
    started = detach("run", "ada", "--prompt", "local", "--detach", "--command", "sleep 20")
    assert started.code == 0, started.stderr
    run_id = started.stdout.strip().split()[-1]
    container = wait_for("the local box", lambda: _show(cli, run_id).get("container_id"))
    inspect = json.loads(
        subprocess.run(["docker", "inspect", container], capture_output=True, text=True).stdout
    )[0]
    subprocess.run(["docker", "kill", container], capture_output=True)
    wait_for("the local run to end", lambda: _show(cli, run_id)["state"] == "finished")
    return _hardening(inspect)


# A lab comes up, twelve boxes run, and runs outlive their agent and their engine: minutes,
# after any other test's lab is down (one lab per machine).
@pytest.mark.timeout(900)
def test_runs_on_a_two_node_swarm_and_a_dead_engine_loses_only_its_run(lab_home: Path) -> None:
    # In this process: the waits below ask every tenth of a second, and a command of its
    # own for each costs the interpreter's start (36 s of CPU over the test).
    cli = Cli(home=lab_home)
    with swarm_lab(2, lab_home) as lab:
        assert "created service impyard-node" in lab.up_output, lab.up_output
        for imp in ("ada", "bo", "cy"):
            assert cli("imp", "create", imp, "--command", PROBE).code == 0
        local = _local_box_hardening(cli)
        serve = serve_process(cli)
        try:
            wait_for(
                "both nodes ready",
                lambda: (
                    sorted(
                        n["name"]
                        for n in json.loads(cli("cluster", "status", "--json").stdout)["nodes"]
                        if n["state"] == "ready"
                    )
                    == list(lab.names)
                ),
                seconds=120,
            )
            for i in range(12):
                add_task(cli, ("ada", "bo", "cy")[i % 3], f"swarm note {i}")
            seen: dict[str, dict[str, Any]] = {}

            def inspect_running() -> bool:
                for node in lab.names:
                    ids = lab.docker(node, "ps", "-q", "--filter", "label=impyard.run").stdout
                    for cid in ids.split():
                        found = lab.docker(node, "inspect", cid, check=False)
                        if found.returncode == 0:  # else it ended between ps and inspect
                            seen.setdefault(node, json.loads(found.stdout)[0])
                done = [r for r in _runs(cli) if r["state"] == "finished" and r["run_id"]]
                return len(done) >= 13

            wait_for("every run to end", inspect_running, seconds=300)
        finally:
            serve.send_signal(signal.SIGTERM)
            serve.communicate(timeout=120)
        remote = [r for r in _runs(cli) if _show(cli, r["run_id"])["node"]]
        assert len(remote) == 12
        assert {r["checkpoint"] for r in remote} == {"integrated"}
        on = Counter(_show(cli, r["run_id"])["node"] for r in remote)
        assert set(on) == set(lab.names), on
        for imp in ("ada", "bo", "cy"):
            assert len(records(cli, imp)) == 4
            assert_linear_and_clean(repo(cli, imp))
        assert seen, "no box was seen running on a node"
        for node, inspect in seen.items():
            assert _hardening(inspect) == local, node
        log = cli("runs", "logs", remote[0]["run_id"]).stdout
        assert "blocked 10.213.0.1:7480" in log and "reached" not in log, log
        assert "blocked 10.213.0.12:2377" in log and "routes: 0" in log, log
        assert "gateway answered 2" in log, log  # its gateway (refusing a mid-run check)

        # A node agent killed mid-run and started again by Swarm: its run is recorded lost
        # (the new agent sweeps the old box) and the task lands once. Then a node's engine dies
        # under a run: that run is recorded lost (nothing of it lands), its task runs again,
        # once, on the node that is left, and the dead node shows down.
        assert (
            cli("imp", "create", "dee", "--command", "sleep 12; exec /opt/impyard/bin/imp").code
            == 0
        )
        serve = serve_process(cli)
        try:
            add_task(cli, "dee", "outlived by its node agent")
            agent_lost = _running_dee(cli)
            restarted = _show(cli, agent_lost["run_id"])["node"]
            old_agent = _node_agent(lab, restarted)
            assert old_agent is not None, f"no node agent runs on {restarted}"
            lab.docker(restarted, "kill", "--signal", "KILL", old_agent)
            _wait_dee_landed(cli, 1)
            new_agent = wait_for(
                "Swarm to start the agent again", lambda: _node_agent(lab, restarted)
            )

            add_task(cli, "dee", "outlived by its node's engine")
            first = _running_dee(cli, besides=frozenset({agent_lost["run_id"]}))
            dead = _show(cli, first["run_id"])["node"]
            os.kill(lab.pids()[dead], signal.SIGKILL)
            _wait_dee_landed(cli, 2)
            states = {
                n["name"]: n["state"]
                for n in json.loads(cli("cluster", "status", "--json").stdout)["nodes"]
            }
        finally:
            serve.send_signal(signal.SIGTERM)
            serve.communicate(timeout=120)
        assert new_agent != old_agent
        swept = _show(cli, agent_lost["run_id"])
        assert swept["checkpoint"] == "quarantined" and "lost" in swept["reason"], swept["reason"]
        lost = _show(cli, first["run_id"])
        assert lost["checkpoint"] == "quarantined" and "lost" in lost["reason"], lost["reason"]
        dee_runs = {r["run_id"]: _show(cli, r["run_id"]) for r in _runs(cli) if r["imp"] == "dee"}
        landed = [r for r in dee_runs.values() if r["checkpoint"] == "integrated"]
        assert len(dee_runs) == 4 and len(landed) == 2, dee_runs
        # The rerun after the engine died: its task's other run (a run id orders runs by
        # the second only, and the rerun may start within the lost run's second).
        (rerun,) = [
            r
            for r in dee_runs.values()
            if r["task_id"] == lost["task_id"] and r["run_id"] != lost["run_id"]
        ]
        assert rerun["node"] != dead and rerun["checkpoint"] == "integrated"
        assert len(records(cli, "dee")) == 2  # each task landed once, never twice
        assert states[dead] == "down", states


def _running_dee(cli: Cli, besides: frozenset[str] = frozenset()) -> dict[str, Any]:
    return wait_for(  # type: ignore[no-any-return]
        "dee's box to start",
        lambda: next(
            (
                r
                for r in _runs(cli)
                if r["imp"] == "dee" and r["state"] == "running" and r["run_id"] not in besides
            ),
            None,
        ),
        seconds=120,
    )


def _wait_dee_landed(cli: Cli, count: int) -> None:
    wait_for(
        f"dee's task {count} to land",
        lambda: (
            sum(r["imp"] == "dee" and r["checkpoint"] == "integrated" for r in _runs(cli)) >= count
        ),
        seconds=180,
    )


def _node_agent(lab: SwarmLab, node: str) -> str | None:
    """The id of the node agent's running container on ``node``, if one runs."""
    found = lab.docker(
        node,
        "ps",
        "-q",
        "--no-trunc",
        "--filter",
        "label=com.docker.swarm.service.name=impyard-node",
    ).stdout.split()
    return found[0] if found else None
