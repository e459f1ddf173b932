"""The settings a restore would install (image, command, agent), and when the owner must
say yes to them.

A backup's ``refs/impyard/settings`` decides what the imp's next box runs, so it is as
untrusted as the remote it came from. Restore shows what each imp would get, and refuses
(unless the owner passes ``--accept-settings``, or ``--keep-settings`` to keep this data
root's) when that is anything but what the imp would run anyway: for an imp this data
root has, its own settings; for a new imp, the defaults (the policy's image and the
image's own command) or exactly what ``impyard imp create --agent`` sets for a known agent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from impyard.box.images.agents import AGENTS
from impyard.knowledge.imps import ImpSettings

Choice = Literal["ask", "accept", "keep"]
Source = Literal["backup", "default", "kept"]
_FIELDS = ("image", "command", "agent")


@dataclass(frozen=True)
class SettingsOffer:
    imp: str
    #: What the backup carries (None: it carries no settings).
    backup: ImpSettings | None
    #: What this data root has for the imp (None: a new imp).
    local: ImpSettings | None
    #: The policy's image, what an imp without settings runs.
    default_image: str
    #: How installing the backup's would differ from what the imp runs anyway, one phrase
    #: a field; empty when it would not.
    differs: tuple[str, ...]

    def decide(self, choice: Choice) -> tuple[ImpSettings, Source]:
        """What the imp gets, and from where, under the owner's ``choice``."""
        if self.local is not None and (choice == "keep" or self.backup is None or not self.differs):
            return self.local, "kept"
        if choice == "keep" or self.backup is None:
            return ImpSettings(), "default"
        return self.backup, "backup"

    def as_dict(self) -> dict[str, Any]:
        return {
            "imp": self.imp,
            "backup": self.backup.as_dict() if self.backup is not None else None,
            "local": self.local.as_dict() if self.local is not None else None,
            "default_image": self.default_image,
            "differs": list(self.differs),
        }


def offer(
    imp: str, backup: ImpSettings | None, local: ImpSettings | None, default_image: str
) -> SettingsOffer:
    return SettingsOffer(imp, backup, local, default_image, _differs(backup, local, default_image))


def _differs(
    backup: ImpSettings | None, local: ImpSettings | None, default_image: str
) -> tuple[str, ...]:
    if backup is None:
        return ()
    if local is not None:
        return tuple(
            f"{name} {shown(getattr(backup, name))} (here: {shown(getattr(local, name))})"
            for name in _FIELDS
            if getattr(backup, name) != getattr(local, name)
        )
    if backup.agent is None:
        found = []
        if backup.image not in (None, default_image):
            found.append(f"image {shown(backup.image)} (default: {shown(default_image)})")
        if backup.command is not None:
            found.append(f"command {shown(backup.command)} (default: the image's own)")
        return tuple(found)
    agent = AGENTS.get(backup.agent)
    if agent is None:
        return (f"agent {shown(backup.agent)} (not an agent this Impyard knows)",)
    found = []
    if backup.image != agent.image:
        found.append(f"image {shown(backup.image)} ({agent.name}'s: {shown(agent.image)})")
    if backup.command != agent.command:
        found.append(f"command {shown(backup.command)} ({agent.name}'s: {shown(agent.command)})")
    return tuple(found)


def shown(value: str | None) -> str:
    """A setting as the owner reads it: quoted with every control character escaped (a
    remote chose it), ``-`` for none."""
    return "-" if value is None else repr(value)


def settings_line(settings: ImpSettings) -> str:
    return ", ".join(f"{name} {shown(getattr(settings, name))}" for name in _FIELDS)
