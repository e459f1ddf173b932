"""What ``impyard agents`` lists: every agent an imp can run, whether its image is built
here, and what its route and ``[box.env]`` need."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from impyard.box.images.agents import AGENTS, Agent
from impyard.common.errors import EngineError, ImageNotFoundError


@dataclass(frozen=True)
class AgentEntry:
    agent: Agent
    #: True or False when the engine answered; None when it could not be asked.
    built: bool | None
    #: The version the built image carries (its label), '' when unknown.
    built_version: str

    def to_dict(self) -> dict[str, Any]:
        agent = self.agent
        return {
            "name": agent.name,
            "image": agent.image,
            "package": agent.package,
            "version": agent.version,
            "built": self.built,
            "built_version": self.built_version or None,
            "api": agent.api,
            "upstream": agent.upstream,
            "route": agent.default_model_route,
            "header": agent.header,
            "value": agent.value,
            "box_env": list(agent.box_env_keys),
            "build": agent.build_hint,
        }


def catalog() -> tuple[list[AgentEntry], str | None]:
    """Every agent with its image's state, and why the engine could not say (or None)."""
    from impyard.box.docker import engine

    entries: list[AgentEntry] = []
    problem: str | None = None
    for agent in AGENTS.values():
        built: bool | None = None
        version = ""
        if problem is None:
            try:
                found = engine.call(
                    "image inspect", engine.api().inspect_image, agent.image, image=agent.image
                )
                labels = (found.get("Config") or {}).get("Labels") or {}
                built, version = True, str(labels.get("impyard.agent-version", ""))
            except ImageNotFoundError:
                built = False
            except EngineError as exc:
                problem = exc.message
        entries.append(AgentEntry(agent, built, version))
    return entries, problem
