"""The swarm lab (``scripts/swarm-lab.sh``): two nodes with engines of their own form a
swarm that runs a task on each, notices a node whose engine died, and ``down`` leaves no
trace of it while the host's engine and routes stay as they were."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers.images import BOX_IMAGE
from tests.helpers.swarm_lab import (
    DATA_DIR,
    SwarmLab,
    lab_dir,
    lab_problem,
    run_script,
    swarm_lab,
)

pytestmark = pytest.mark.docker

MANAGER, WORKER = "impyard-lab-1", "impyard-lab-2"
SERVICE = f"lab-probe-{os.getpid()}"


@pytest.fixture
def lab_allowed() -> None:
    problem = lab_problem()
    if problem is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(problem)
    pytest.skip(problem)


def host(*args: str) -> str:
    return subprocess.run(args, capture_output=True, text=True, check=True, timeout=30).stdout


def host_engine() -> dict[str, str]:
    info = json.loads(host("docker", "info", "--format", "{{json .}}"))
    return {"id": info["ID"], "swarm": info["Swarm"]["LocalNodeState"]}


def poll(what: str, probe: Callable[[], bool], seconds: float = 60) -> None:
    """Wait until ``probe()`` is true; fail naming ``what`` after ``seconds``."""
    deadline = time.monotonic() + seconds
    while not probe():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)


def node_states(lab: SwarmLab) -> dict[str, tuple[str, str]]:
    """Each node's hostname -> (status, manager status), as the manager sees them."""
    out = lab.docker(
        MANAGER, "node", "ls", "--format", "{{.Hostname}} {{.Status}} {{.ManagerStatus}}"
    ).stdout
    rows = (line.split(" ", 2) for line in out.splitlines())
    return {row[0]: (row[1], row[2].strip() if len(row) > 2 else "") for row in rows}


def lab_processes(dirs: list[Path]) -> list[str]:
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if any(f"{d}/" in cmdline for d in dirs):
            found.append(f"{proc.name}: {cmdline[:120]}")
    return found


def lab_mounts(dirs: list[Path]) -> list[str]:
    points = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    return [p for p in points if any(p == str(d) or p.startswith(f"{d}/") for d in dirs)]


def check_swarm(lab: SwarmLab) -> None:
    assert node_states(lab) == {MANAGER: ("Ready", "Leader"), WORKER: ("Ready", "")}
    engines = {}
    for node in lab.names:
        info = json.loads(lab.docker(node, "info", "--format", "{{json .}}").stdout)
        engines[node] = info["ID"]
        assert info["Name"] == node
        labels = json.loads(
            lab.docker(
                MANAGER,
                "node",
                "inspect",
                info["Swarm"]["NodeID"],
                "--format",
                "{{json .Spec.Labels}}",
            ).stdout
        )
        has_runsc = "runsc" in info["Runtimes"]
        assert (labels.get("impyard.runsc") == "true") == has_runsc, (node, labels)
    assert len(set(engines.values())) == 2, engines
    lab.docker(WORKER, "image", "inspect", "impyard-box:latest")


def check_task_on_each_node(lab: SwarmLab) -> None:
    lab.docker(
        MANAGER, "service", "create", "--detach", "--name", SERVICE, "--mode", "global-job",
        "--network", "host", "--no-resolve-image", BOX_IMAGE,
        "sh", "-c", 'echo "ran on $(hostname)"; ip route',
    )  # fmt: skip

    def both_complete() -> bool:
        out = lab.docker(
            MANAGER, "service", "ps", SERVICE, "--format", "{{.Node}} {{.CurrentState}}"
        ).stdout
        done = {line.split()[0] for line in out.splitlines() if " Complete " in f"{line} "}
        return done == set(lab.names)

    poll("the global job to complete on both nodes", both_complete)
    logs = lab.docker(MANAGER, "service", "logs", "--raw", SERVICE).stdout
    assert {f"ran on {n}" for n in lab.names} <= set(logs.splitlines()), logs
    # The nodes reach the host and each other only: no task gets a way out.
    assert "default" not in logs, logs


# One lab per machine: this test may wait out another test's lab (minutes) before its own.
@pytest.mark.one_runtime
@pytest.mark.timeout(900)
def test_two_node_lab(lab_allowed: None, tmp_path: Path) -> None:
    host_before = host_engine()
    routes_before = host("ip", "route", "show", "default")
    home = tmp_path / "home"
    images = [] if BOX_IMAGE == "impyard-box:latest" else [BOX_IMAGE]
    with swarm_lab(2, home, images) as lab:
        assert lab.names == (MANAGER, WORKER)
        assert (home / "policy" / "org.toml").is_file()
        assert (lab.directory / "home").read_text().strip() == str(home)
        check_swarm(lab)

        again = run_script("up", "1", "--home", str(home), timeout=60)
        assert again.returncode == 1 and "already up" in again.stderr, again.stderr
        assert MANAGER in again.stderr and "down" in again.stderr

        check_task_on_each_node(lab)

        os.kill(lab.pids()[WORKER], signal.SIGKILL)  # an engine that crashed
        poll("the manager to see the worker Down", lambda: node_states(lab)[WORKER][0] == "Down")

    dirs = [lab.directory, DATA_DIR]
    assert not [ns for ns in host("ip", "netns", "list").split() if ns.startswith("impyard-lab")]
    assert "iylab" not in host("ip", "-o", "link", "show")
    assert lab_processes(dirs) == []
    assert lab_mounts(dirs) == []
    assert not lab_dir().exists() and not DATA_DIR.exists()
    assert host_engine() == host_before
    assert host("ip", "route", "show", "default") == routes_before
    assert not host(
        "docker", "ps", "-aq", "--filter", f"label=com.docker.swarm.service.name={SERVICE}"
    )
