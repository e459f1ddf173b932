"""A cluster on this host's engine: serve with ``[cluster]`` enabled and real ``impyard
node`` processes, each its own node (its own name and work directory), talking to serve
over the cluster API as node agents on other machines do. The lab swarm
(``scripts/swarm-lab.sh``) runs the same agents as Swarm services on engines of their own."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.helpers.cli import Cli
from tests.helpers.git import GIT_ENV


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def enable_cluster(cli: Cli, *, listen: str | None = None, lease_seconds: float = 5) -> str:
    """Turn ``[cluster]`` on in the org policy and deploy it; the cluster API's URL."""
    listen = listen or f"127.0.0.1:{free_port()}"
    org = cli.home / "policy" / "org.toml"
    org.write_text(
        org.read_text()
        + f'\n[cluster]\nenabled = true\nlisten = "{listen}"\nlease_seconds = {lease_seconds}\n'
    )
    result = cli("deploy")
    assert result.code == 0, result.stderr
    return f"http://{listen}"


def wait_for(what: str, check: Callable[[], Any], seconds: float = 60) -> Any:
    deadline = time.monotonic() + seconds
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


@dataclass
class HostNodes:
    cli: Cli
    url: str
    work: Path
    procs: dict[str, subprocess.Popen[str]] = field(default_factory=dict)

    def env(self, name: str) -> dict[str, str]:
        return {
            **os.environ,
            **GIT_ENV,
            "IMPYARD_CLUSTER_URL": self.url,
            "IMPYARD_NODE_NAME": name,
            "IMPYARD_NODE_WORK": str(self.work),
            "IMPYARD_NODE_CAPACITY": "2",
            "IMPYARD_CLUSTER_TOKEN_FILE": str(self.cli.home / "cluster" / "token"),
        }

    def start(self, name: str) -> subprocess.Popen[str]:
        with open(self.work / f"{name}.log", "a") as log:  # the process keeps its own copy
            proc = subprocess.Popen(
                [sys.executable, "-m", "impyard", "node"],
                stdout=log,
                stderr=subprocess.STDOUT,
                text=True,
                env=self.env(name),
            )
        self.procs[name] = proc
        return proc

    def log(self, name: str) -> str:
        return (self.work / f"{name}.log").read_text(errors="replace")

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        self.procs[name].send_signal(sig)
        if sig == signal.SIGKILL:
            self.procs[name].wait(10)

    def status(self) -> list[dict[str, Any]]:
        result = self.cli("cluster", "status", "--json")
        assert result.code == 0, result.stderr
        return json.loads(result.stdout)["nodes"]  # type: ignore[no-any-return]

    def ready(self, *names: str) -> None:
        def all_ready() -> bool:
            states = {n["name"]: n["state"] for n in self.status()}
            return all(states.get(name) == "ready" for name in names)

        wait_for(f"nodes {names} ready", all_ready)


@contextmanager
def host_nodes(cli: Cli, *names: str, url: str) -> Iterator[HostNodes]:
    """Node agents as host processes (their token is the data root's, as a secret is)."""
    # The token is made by serve (or deploy); make it now so an agent can read it at start.
    from impyard.cluster.plane.token import cluster_token
    from impyard.home import Home

    cluster_token(Home(cli.home))
    work = cli.home.parent / "node-work"
    work.mkdir(exist_ok=True)
    nodes = HostNodes(cli, url, work)
    try:
        for name in names:
            nodes.start(name)
        yield nodes
    finally:
        for proc in nodes.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(10)
        _remove_leftover_boxes(work)


def _remove_leftover_boxes(work: Path) -> None:
    """Boxes a killed agent left behind (a restarted agent removes its own)."""
    from impyard.box.launcher.launch import find_boxes, remove_box
    from impyard.box.spec import LABEL_ROOT, root_label

    for node_dir in work.iterdir():
        if node_dir.is_dir():
            for box in find_boxes({LABEL_ROOT: root_label(node_dir)}):
                remove_box(box.container_id)
