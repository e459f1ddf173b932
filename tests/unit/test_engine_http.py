"""The engine client's HTTP side, against a small HTTP server on a unix socket that answers
the way the engine does (JSON bodies, ``{"message": ...}`` errors, multiplexed output).

What reaches a user is the translated error, so that is what is asserted; the engine
itself is exercised by the docker-marked tests."""

from __future__ import annotations

import http.server
import json
import socketserver
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from impyard.box.docker import engine
from impyard.box.docker.engine import (
    BoxImageNotFoundError,
    EngineCallError,
    EngineObjectNotFoundError,
    EngineUnreachableError,
    call,
)
from impyard.box.docker.engineapi import EngineAPI
from impyard.box.docker.enginehttp import EngineTimeout, Transport
from impyard.box.spec import box_labels

Answer = tuple[int, bytes]


class FakeEngine(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def __init__(self, path: Path, route: Callable[[str, str], Answer]) -> None:
        self.route = route
        self.seen: list[str] = []
        self.connections = 0
        self.hang_up_after_answer = False
        super().__init__(str(path), _Handler)

    def handle_error(self, request: object, client_address: object) -> None:
        # A client that gave up first (the timeout tests) closed its end: expected here.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)  # type: ignore[arg-type]


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: FakeEngine

    def setup(self) -> None:
        super().setup()
        self.server.connections += 1

    def address_string(self) -> str:
        return "unix"

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        self.server.seen.append(f"{self.command} {self.path}")
        status, body = self.server.route(self.command, self.path)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        self.close_connection = self.server.hang_up_after_answer

    do_GET = do_POST = do_DELETE = _answer


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[[Callable[[str, str], Answer]], FakeEngine]]:
    servers: list[FakeEngine] = []

    def start(route: Callable[[str, str], Answer]) -> FakeEngine:
        server = FakeEngine(tmp_path / f"engine{len(servers)}.sock", route)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


_clients: list[EngineAPI] = []


@pytest.fixture(autouse=True)
def _close_clients() -> Iterator[None]:
    yield
    while _clients:
        _clients.pop().close()


def api_for(server: FakeEngine, timeout: float = 5) -> EngineAPI:
    api = EngineAPI(Transport(f"unix://{server.server_address}", "1.41", timeout))
    _clients.append(api)
    return api


def error(status: int, message: str) -> Answer:
    return status, json.dumps({"message": message}).encode()


def test_answers_are_json_and_connections_are_kept_alive(serve) -> None:  # type: ignore[no-untyped-def]
    server = serve(lambda method, path: (200, b'{"Id": "sha256:abc"}'))
    api = api_for(server)
    for _ in range(5):
        assert api.inspect_image("impyard-box:latest") == {"Id": "sha256:abc"}
    assert server.seen[0] == "GET /v1.41/images/impyard-box%3Alatest/json"
    assert server.connections == 1


def test_engine_errors_become_errors_that_name_the_object(serve) -> None:  # type: ignore[no-untyped-def]
    def route(method: str, path: str) -> Answer:
        if "/images/" in path:
            return error(404, "No such image: absent:1")
        if "/volumes/" in path:
            return error(404, "get v1: no such volume")
        if path.endswith("/kill"):
            return error(409, "Container c1 is not running")
        return error(404, "No such container: c1")

    server = serve(route)
    api = api_for(server)
    with pytest.raises(BoxImageNotFoundError, match="absent:1 is not in the local Docker"):
        call("image inspect", api.inspect_image, "absent:1", image="absent:1")
    with pytest.raises(EngineObjectNotFoundError, match="no such volume v1"):
        call("volume remove", api.remove_volume, "v1", volume="v1")
    with pytest.raises(EngineObjectNotFoundError, match="no such container c1"):
        call("inspect", api.inspect_container, "c1", container_id="c1")
    with pytest.raises(EngineCallError, match=r"docker kill failed \(HTTP 409\): .*not running"):
        call("kill", api.kill, "c1", container_id="c1")


def test_server_errors_are_retried_then_reported(serve) -> None:  # type: ignore[no-untyped-def]
    answers = [error(500, "busy"), error(500, "busy"), (200, b'{"Version": "27"}')]
    server = serve(lambda method, path: answers.pop(0))
    assert call("version", api_for(server).version) == {"Version": "27"}

    always = serve(lambda method, path: error(500, "mount failed"))
    api = api_for(always)
    with pytest.raises(EngineCallError, match=r"HTTP 500\): mount failed"):
        call("start", api.start, "c1", retry_server_errors=False, container_id="c1")
    assert len(always.seen) == 1  # a deterministic start failure is not retried


def test_unreachable_engine_names_its_address(tmp_path: Path) -> None:
    api = EngineAPI(Transport(f"unix://{tmp_path}/absent.sock", "1.41", 2))
    with pytest.raises(EngineUnreachableError, match=r"absent\.sock: no such file"):
        call("ping", api.ping)


def test_unsupported_engine_address_is_an_unreachable_engine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DOCKER_HOST", "ssh://user@host")
    engine.reset_client()
    try:
        with pytest.raises(EngineUnreachableError, match="unix:// or tcp://"):
            engine.api()
    finally:
        engine.reset_client()


def test_a_wait_that_outlasts_its_timeout_is_a_timeout(serve) -> None:  # type: ignore[no-untyped-def]
    release = threading.Event()

    def route(method: str, path: str) -> Answer:
        release.wait(10)
        return 200, b'{"StatusCode": 0}'

    server = serve(route)
    api = api_for(server)
    with pytest.raises(EngineTimeout):
        api.wait("c1", timeout=0.2)
    release.set()
    with pytest.raises(EngineCallError, match="did not answer inspect in time"):
        release.clear()
        call("inspect", api_for(server, timeout=0.2).inspect_container, "c1", container_id="c1")
    release.set()


def test_an_idle_connection_the_engine_closed_is_replaced(serve) -> None:  # type: ignore[no-untyped-def]
    server = serve(lambda method, path: (200, b"{}"))
    server.hang_up_after_answer = True  # kept alive by its headers, closed in fact
    api = api_for(server)
    for _ in range(3):
        assert api.inspect_container("c1") == {}
    assert server.connections == 3


def test_output_frames_are_split_whatever_the_reads(serve, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    frames = b"".join(
        bytes([stream, 0, 0, 0]) + len(data).to_bytes(4, "big") + data
        for stream, data in ((1, b"out one\n"), (2, b"err\n"), (1, b""), (1, b"x" * 70000))
    )
    server = serve(lambda method, path: (200, frames))
    chunks = list(api_for(server).logs("c1"))
    assert chunks == [b"out one\n", b"err\n", b"x" * 70000]
    assert server.seen == ["GET /v1.41/containers/c1/logs?stdout=1&stderr=1"]


def test_nothing_is_created_without_its_data_roots_label(serve, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A container or volume no recovery could tell as its data root's is never created."""
    server = serve(lambda method, path: (201, b'{"Id": "abc", "Name": "v"}'))
    api = api_for(server)
    unowned = {"impyard.run": "run-x", "impyard.imp": "yuko"}
    with pytest.raises(ValueError, match=r"impyard\.root"):
        api.create_container("impyard-box:latest", labels=unowned)
    with pytest.raises(ValueError, match=r"impyard\.root"):
        api.create_volume("v", labels=unowned)
    assert server.seen == []
    owned = box_labels("run-x", "yuko", root=tmp_path)
    assert api.create_container("impyard-box:latest", labels=owned)["Id"] == "abc"
    assert api.create_volume("v", labels=owned)["Name"] == "v"
    assert [seen.split("?")[0] for seen in server.seen] == [
        "POST /v1.41/containers/create",
        "POST /v1.41/volumes/create",
    ]
