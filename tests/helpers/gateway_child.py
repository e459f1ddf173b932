"""A run's gateway alone in a child process, so a test can read that process's peak memory.

``python -m tests.helpers.gateway_child <data root> <upstream port>`` serves on a free
loopback port (printed as the first line), allows GET to ``127.0.0.1:<upstream port>``
with a 1 GiB response budget and the archive on (objects up to 1 GiB), then answers each
line on stdin: ``memory`` prints ``<VmHWM kB> <VmRSS kB>``; ``close`` closes the gateway
and exits.
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path

from impyard.gateway import Gateway
from impyard.home import Home
from impyard.journal.log import Journal
from impyard.policy.models import GatewayPolicy

RUN_ID = "run-20260711T120000Z-0123456789"
GIB = 1024**3


def memory_kb() -> tuple[int, int]:
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
    return int(fields["VmHWM"].split()[0]), int(fields["VmRSS"].split()[0])


def main(root: str, upstream_port: int) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    home = Home(Path(root))
    home.root.mkdir(parents=True, exist_ok=True)
    policy = GatewayPolicy.model_validate(
        {
            "port": listener.getsockname()[1],
            "allow": [{"host": "127.0.0.1", "ports": [upstream_port], "methods": ["GET"]}],
            "budget": {"response_bytes_per_run": GIB},
            "archive": {
                "enabled": True,
                "max_bytes_per_run": GIB,
                "max_object_bytes": GIB,
                "max_total_bytes": GIB,
            },
        }
    )
    gateway = Gateway.start(
        policy, home=home, imp="yuko", run_id=RUN_ID, journal=Journal(home.journal)
    )
    gateway.serve(listener)
    print(listener.getsockname()[1], flush=True)
    for line in sys.stdin:
        if line.strip() == "memory":
            print(*memory_kb(), flush=True)
        elif line.strip() == "close":
            break
    gateway.close()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
