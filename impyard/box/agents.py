"""Agents an imp can be created with (``impyard imp create <imp> --agent NAME``).

An agent is an image plus the adapter that runs it as an imp; the adapter lives
in the image (``box/``), so what the agent is told comes from the image and
never from the imp's knowledge.
"""

from __future__ import annotations

from dataclasses import dataclass

from impyard.contract import DEFAULT_IMAGE
from impyard.errors import UsageError

#: The ``[box.env]`` variable naming the gateway route an imp's model calls go to.
MODEL_ROUTE_ENV = "IMPYARD_MODEL_ROUTE"


@dataclass(frozen=True)
class Agent:
    name: str
    image: str
    #: The imp's command (run as ``/bin/sh -c``); ``exec`` keeps the agent's exit status.
    command: str
    build_hint: str
    #: The box variable naming the gateway route the agent sends its model calls to
    #: (policy ``[box.env]``), and the route it calls when the variable is unset.
    model_route_env: str = MODEL_ROUTE_ENV
    default_model_route: str = "llm"


AGENTS: dict[str, Agent] = {
    "pi": Agent(
        name="pi",
        image="impyard-pi:latest",
        command="exec /opt/impyard/bin/pi-imp",
        build_hint="just box-pi",
    ),
}


def build_hint(image: str) -> str:
    """How an owner gets ``image`` into the engine (nothing is ever pulled)."""
    if image == DEFAULT_IMAGE:
        return "build it with `just box`"
    for agent in AGENTS.values():
        if agent.image == image:
            return f"build it with `{agent.build_hint}`"
    return f"build it (`docker build -t {image} …`) or load it (`docker load -i FILE`)"


def agent_named(name: str) -> Agent:
    try:
        return AGENTS[name]
    except KeyError:
        known = ", ".join(sorted(AGENTS))
        raise UsageError(f"unknown agent {name!r} (known: {known})") from None
