"""Is the engine there, which version, and are the box images in it.

The probe is a seam: ``collect`` takes any ``EngineProbe`` (tests give one that answers
without an engine); ``DockerProbe`` asks the real one through ``impyard.box.docker.engine``
with a short timeout, so a stuck engine costs the screen seconds, not minutes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from impyard.common.errors import EngineError, ImageNotFoundError
from impyard.status.model import EngineStatus, ImageStatus

#: Seconds one engine call of ``status`` may take.
ENGINE_TIMEOUT_SECONDS = 2.0


@dataclass(frozen=True)
class EngineVersion:
    version: str | None
    api_version: str | None


class EngineProbe(Protocol):
    def url(self) -> str: ...

    def version(self) -> EngineVersion:
        """Raises EngineError when the engine cannot be asked."""
        ...

    def has_image(self, image: str) -> bool:
        """False when the engine has no such image; EngineError when it cannot say."""
        ...


class DockerProbe:
    """The engine ``DOCKER_HOST`` names (no connection is made until the first call)."""

    def __init__(self, timeout_seconds: float = ENGINE_TIMEOUT_SECONDS) -> None:
        self.timeout_seconds = timeout_seconds

    def url(self) -> str:
        from impyard.box.docker import engine

        return engine.engine_url()

    def version(self) -> EngineVersion:
        from impyard.box.docker import engine

        with engine.timeout_within(self.timeout_seconds):
            info = engine.call("version", engine.api().version)
        version, api_version = info.get("Version"), info.get("ApiVersion")
        return EngineVersion(
            version=version if isinstance(version, str) else None,
            api_version=api_version if isinstance(api_version, str) else None,
        )

    def has_image(self, image: str) -> bool:
        from impyard.box.docker import engine

        try:
            with engine.timeout_within(self.timeout_seconds):
                engine.call("image inspect", engine.api().inspect_image, image, image=image)
        except ImageNotFoundError:
            return False
        return True


def engine_status(probe: EngineProbe) -> EngineStatus:
    try:
        found = probe.version()
    except EngineError as exc:
        return EngineStatus(url=probe.url(), reachable=False, error=exc.message)
    return EngineStatus(
        url=probe.url(),
        reachable=True,
        version=found.version,
        api_version=found.api_version,
    )


def image_statuses(
    probe: EngineProbe, named: dict[str, list[str]], engine_reachable: bool
) -> list[ImageStatus]:
    """Each named image present, missing, or unknown (engine down, or it stopped answering)."""
    statuses: list[ImageStatus] = []
    asking = engine_reachable
    for image, used_by in sorted(named.items()):
        if not asking:
            statuses.append(
                ImageStatus(image=image, state="unknown", used_by=used_by, detail="engine down")
            )
            continue
        try:
            present = probe.has_image(image)
        except EngineError as exc:
            # One failure is enough: the rest would each wait out the same timeout.
            asking = False
            statuses.append(
                ImageStatus(image=image, state="unknown", used_by=used_by, detail=exc.message)
            )
            continue
        statuses.append(
            ImageStatus(image=image, state="present" if present else "missing", used_by=used_by)
        )
    return statuses
