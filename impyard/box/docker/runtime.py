"""The engine runtime a box runs under: runc (namespaces, cgroups and seccomp on the host's
kernel) or runsc (gVisor: the box's system calls meet a kernel of its own, in user space).

The engine names its runtimes in ``/info``; runsc is one an owner registers
(``scripts/gvisor.sh``), so a policy that names it is checked against the engine before it
is deployed and before a box is created.
"""

from __future__ import annotations

from impyard.box.docker import engine
from impyard.common.errors import EngineError

#: How the owner gets runsc onto an engine that lacks it.
RUNSC_FIX = (
    "run `bash scripts/gvisor.sh` as root (installs gVisor's runsc and registers it with "
    "the engine as runsc, beside runc)"
)


class RuntimeUnavailableError(EngineError):
    """The engine has no runtime of the name a policy or command asks for."""

    def __init__(self, runtime: str, known: list[str]) -> None:
        have = ", ".join(known) or "none"
        fix = RUNSC_FIX if runtime == "runsc" else "register it in /etc/docker/daemon.json"
        super().__init__(f"the Docker engine has no runtime {runtime} (it has: {have}); {fix}")
        self.runtime = runtime
        self.known = known


def engine_runtimes() -> list[str]:
    """The runtimes the engine can create containers with, by name."""
    info = engine.call("info", engine.api().info)
    return sorted((info.get("Runtimes") or {}).keys())


def require_runtime(runtime: str) -> None:
    """RuntimeUnavailableError unless the engine has ``runtime`` (runc always is)."""
    if runtime == "runc":
        return
    known = engine_runtimes()
    if runtime not in known:
        raise RuntimeUnavailableError(runtime, known)
