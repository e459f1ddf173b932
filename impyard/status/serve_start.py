"""What ``impyard serve`` says as it starts: where, with what, under which policy and engine.

The facts are the ones ``impyard status`` shows (the same policy section and engine
probe), gathered before serve recovers anything, so an owner reading serve's log (or
``journalctl``) knows what the lines after it ran against.
"""

from __future__ import annotations

from dataclasses import dataclass

from impyard.home import Home
from impyard.knowledge.imps import list_imps
from impyard.status.engine import DockerProbe, EngineProbe, engine_status
from impyard.status.model import EngineStatus, PolicySection
from impyard.status.policy import policy_section


@dataclass(frozen=True)
class ServeStart:
    home: str
    concurrency: int
    once: bool
    imps: list[str]
    policy: PolicySection
    engine: EngineStatus


def serve_start(
    home: Home, concurrency: int, *, once: bool, probe: EngineProbe | None = None
) -> ServeStart:
    """The start facts of a serve on ``home``; ``probe`` stands in for the engine."""
    return ServeStart(
        home=str(home.root),
        concurrency=concurrency,
        once=once,
        imps=list_imps(home),
        policy=policy_section(home),
        engine=engine_status(probe or DockerProbe()),
    )
