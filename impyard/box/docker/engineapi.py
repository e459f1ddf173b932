"""The engine calls Impyard makes, one HTTP request each (no hidden inspects or pings).

Names and answers follow the engine's API (``/containers/create`` answers ``{"Id": …}``,
inspect answers the engine's JSON as is), so what a call does can be read in the
engine's API reference. Errors are ``enginehttp``'s; ``engine.call`` translates them.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterator
from typing import Any

from impyard.box.docker.enginehttp import AnswerTooLarge, RawStream, Transport
from impyard.box.spec import LABEL_ROOT


def _q(name: str) -> str:
    return urllib.parse.quote(name, safe="")


def _own(labels: dict[str, str], what: str) -> None:
    """Refuse to create what no recovery or gc would find: a host that dies after the
    create leaves it behind, and only its data root's label says whose it is."""
    if not labels.get(LABEL_ROOT):
        raise ValueError(f"a {what} Impyard creates must carry the {LABEL_ROOT} label")


class EngineAPI:
    def __init__(self, transport: Transport) -> None:
        self.transport = transport

    def close(self) -> None:
        self.transport.close()

    # -- engine --------------------------------------------------------------------------

    def version(self) -> dict[str, Any]:
        answer: dict[str, Any] = self.transport.request("GET", "/version")
        return answer

    def info(self) -> dict[str, Any]:
        answer: dict[str, Any] = self.transport.request("GET", "/info")
        return answer

    def ping(self) -> bool:
        """True; ``NotAnEngineAnswer`` when what answers at the address says anything but
        the engine's ``OK``."""
        answer = self.transport.fetch("GET", "/_ping")
        if answer.data.strip() != b"OK":
            raise answer.not_an_engine()
        return True

    # -- images --------------------------------------------------------------------------

    def inspect_image(self, image: str) -> dict[str, Any]:
        answer: dict[str, Any] = self.transport.request("GET", f"/images/{_q(image)}/json")
        return answer

    def image_ids(self) -> list[str]:
        """The ids of every image the engine holds."""
        answer: list[dict[str, Any]] = self.transport.request("GET", "/images/json")
        return [str(row["Id"]) for row in answer]

    # -- containers ----------------------------------------------------------------------

    def create_container(
        self,
        image: str,
        *,
        labels: dict[str, str],
        command: list[str] | None = None,
        entrypoint: list[str] | None = None,
        user: str | None = None,
        environment: dict[str, str] | None = None,
        working_dir: str | None = None,
        name: str | None = None,
        network_disabled: bool = False,
        host_config: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        _own(labels, "container")
        config: dict[str, Any] = {
            "Image": image,
            "Cmd": command,
            "Entrypoint": entrypoint,
            "User": user or "",
            "Env": [f"{k}={v}" for k, v in (environment or {}).items()],
            "Labels": labels,
            "WorkingDir": working_dir or "",
            "NetworkDisabled": network_disabled,
            "Tty": False,
            "OpenStdin": False,
            "AttachStdin": False,
            "AttachStdout": True,
            "AttachStderr": True,
            "HostConfig": host_config or {},
        }
        answer: dict[str, Any] = self.transport.request(
            "POST", "/containers/create", query={"name": name}, body=config
        )
        return answer

    def start(self, container_id: str) -> None:
        self.transport.request("POST", f"/containers/{_q(container_id)}/start")

    def wait(self, container_id: str, timeout: float | None = None) -> dict[str, Any]:
        """Blocks until the box ends; ``EngineTimeout`` after ``timeout`` seconds."""
        answer: dict[str, Any] = self.transport.request(
            "POST", f"/containers/{_q(container_id)}/wait", timeout=timeout
        )
        return answer

    def inspect_container(self, container_id: str) -> dict[str, Any]:
        answer: dict[str, Any] = self.transport.request(
            "GET", f"/containers/{_q(container_id)}/json"
        )
        return answer

    def kill(self, container_id: str) -> None:
        self.transport.request("POST", f"/containers/{_q(container_id)}/kill")

    def remove_container(self, container_id: str, *, v: bool = False, force: bool = False) -> None:
        self.transport.request(
            "DELETE", f"/containers/{_q(container_id)}", query={"v": v, "force": force}
        )

    def containers(
        self, *, all: bool = False, filters: dict[str, Any] | None = None
    ) -> list[dict[str, Any]]:
        answer: list[dict[str, Any]] = self.transport.request(
            "GET", "/containers/json", query={"all": all, "filters": _filters(filters)}
        )
        return answer

    def logs(self, container_id: str) -> Iterator[bytes]:
        """Everything the engine kept of a box's stdout and stderr, streamed."""
        stream = self.transport.stream(
            "GET",
            f"/containers/{_q(container_id)}/logs",
            query={"stdout": True, "stderr": True},
        )
        try:
            yield from stream.frames()
        finally:
            stream.close()

    def attach(self, container_id: str) -> RawStream:
        """The box's output from its first byte (attach before ``start``).

        No ``logs`` replay: the engine joins the stream before it answers, so nothing is
        missed, and a replay read after the box's first write would hand it over twice."""
        return self.transport.hijack(
            f"/containers/{_q(container_id)}/attach",
            query={"stdout": True, "stderr": True, "stream": True},
        )

    def get_archive(self, container_id: str, path: str, limit: int) -> bytes | None:
        """A tar of ``path`` in the box's filesystem, or None when it is over ``limit``."""
        try:
            answer = self.transport.fetch(
                "GET",
                f"/containers/{_q(container_id)}/archive",
                query={"path": path},
                limit=limit,
            )
        except AnswerTooLarge:
            return None
        return answer.data

    # -- volumes -------------------------------------------------------------------------

    def create_volume(
        self,
        name: str,
        *,
        driver: str = "local",
        driver_opts: dict[str, str] | None = None,
        labels: dict[str, str],
    ) -> dict[str, Any]:
        _own(labels, "volume")
        body = {"Name": name, "Driver": driver, "DriverOpts": driver_opts or {}}
        body["Labels"] = labels
        answer: dict[str, Any] = self.transport.request("POST", "/volumes/create", body=body)
        return answer

    def remove_volume(self, name: str) -> None:
        self.transport.request("DELETE", f"/volumes/{_q(name)}")

    def volumes(self, *, filters: dict[str, Any] | None = None) -> dict[str, Any]:
        answer: dict[str, Any] = self.transport.request(
            "GET", "/volumes", query={"filters": _filters(filters)}
        )
        return answer


def _filters(filters: dict[str, Any] | None) -> dict[str, list[str]] | None:
    """The engine's filter form: each key maps to a list of values."""
    if not filters:
        return None
    return {k: v if isinstance(v, list) else [str(v)] for k, v in filters.items()}
