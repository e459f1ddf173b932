"""A Docker Swarm of N nodes on this machine (``scripts/swarm-lab.sh``), for docker tests.

``swarm_lab(n, home)`` runs ``up``, yields a :class:`SwarmLab` (node names, each node's
engine socket, a ``docker`` runner against one node, the engines' pids) and runs ``down``
on the way out, whatever happened. The lab needs root; only one lab runs on a machine.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "swarm-lab.sh"
DEFAULT_LAB_DIR = Path("/run/impyard-lab")
DATA_DIR = Path("/var/lib/impyard-lab")
#: Held (flock) while a test's lab is up.
LOCK_FILE = Path("/run/impyard-lab.lock")


def lab_dir() -> Path:
    return Path(os.environ.get("IMPYARD_LAB_DIR") or DEFAULT_LAB_DIR)


def run_script(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """The lab script with ``args``; ``impyard`` resolves to this interpreter's (the lab
    initializes its data root with it)."""
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    return subprocess.run(
        ["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=timeout
    )


def lab_problem() -> str | None:
    """Why a lab cannot start here, or None."""
    if os.geteuid() != 0:
        return "the swarm lab needs root (network namespaces, dockerd)"
    return None


@dataclass(frozen=True)
class SwarmLab:
    names: tuple[str, ...]
    directory: Path
    #: What ``up`` printed: one line per step, with its seconds.
    up_output: str

    def socket(self, node: str) -> Path:
        return self.directory / node / "docker.sock"

    @property
    def sockets(self) -> dict[str, Path]:
        return {name: self.socket(name) for name in self.names}

    def docker(
        self, node: str, *args: str, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """The docker CLI against ``node``'s engine; ``check`` fails with its stderr."""
        result = subprocess.run(
            ["docker", "-H", f"unix://{self.socket(node)}", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"docker {' '.join(args)} on {node} exited {result.returncode}: {result.stderr}"
            )
        return result

    def pids(self) -> dict[str, int]:
        """Each node's dockerd pid, from ``swarm-lab.sh pids``."""
        result = run_script("pids", timeout=30)
        assert result.returncode == 0, result.stderr
        found = {}
        for line in result.stdout.splitlines():
            name, pid = line.split()
            found[name] = int(pid)
        return found


@contextmanager
def swarm_lab(n: int, home: Path, images: Sequence[str] = ()) -> Iterator[SwarmLab]:
    """An ``n``-node lab whose data root is ``home``; taken down on the way out."""
    extra = [arg for image in images for arg in ("--image", image)]
    # One lab per machine: tests on parallel workers take turns. The file closes even when a
    # test's timeout cuts the wait short.
    with open(LOCK_FILE, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            up = run_script("up", str(n), "--home", str(home), *extra, timeout=180)
            if up.returncode != 0:
                raise AssertionError(
                    f"swarm-lab up exited {up.returncode}:\n{up.stdout}{up.stderr}"
                )
            names = tuple(f"impyard-lab-{k}" for k in range(1, n + 1))
            yield SwarmLab(names, lab_dir(), up.stdout)
        finally:
            down = run_script("down", timeout=120)
            if down.returncode != 0 and sys.exc_info()[0] is None:
                raise AssertionError(f"swarm-lab down exited {down.returncode}:\n{down.stderr}")
