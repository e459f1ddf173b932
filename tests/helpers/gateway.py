"""A run's gateway on a host-loopback listener (no Docker, no network namespace), and a
client that talks to it as a box's HTTP client would."""

from __future__ import annotations

import http.client
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from impyard.gateway import Gateway
from impyard.home import Home
from impyard.journal.log import Journal
from impyard.policy.models import GatewayPolicy
from tests.helpers.upstream import Upstream

SECRET = "sk-test-7f3c91a2d0e4-do-not-leak"
RUN_ID = "run-20260711T120000Z-0123456789"


def gateway_policy(upstream_port: int, gateway_port: int, **extra: Any) -> GatewayPolicy:
    data: dict[str, Any] = {
        "enabled": True,
        "port": gateway_port,
        "allow": [
            {"host": "127.0.0.1", "ports": [upstream_port], "methods": ["GET", "HEAD"]},
            {"host": "localhost", "ports": [upstream_port], "methods": ["GET"]},
        ],
        "route": [
            {
                "name": "llm",
                "upstream": f"http://127.0.0.1:{upstream_port}/v1",
                "header": "Authorization",
                "value": "Bearer {secret}",
                "secret_env": "IMPYARD_TEST_GATEWAY_SECRET",
                "methods": ["POST", "GET"],
                "allow_private": True,
            }
        ],
        "budget": {},
    }
    data.update(extra)
    return GatewayPolicy.model_validate(data)


@dataclass
class Served:
    gateway: Gateway
    port: int
    journal: Journal
    home: Home


def loopback_listener(backlog: int) -> tuple[socket.socket, int]:
    """A socket listening on a free loopback port, for a gateway to serve on; and the port."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(backlog)
    return listener, listener.getsockname()[1]


def read_until_closed(sock: socket.socket) -> bytes:
    """All ``sock`` receives until the peer closes it; bounded, so a gateway that never
    closes fails the test rather than hanging it."""
    data = b""
    for _ in range(1000):
        piece = sock.recv(65536)
        if not piece:
            break
        data += piece
    return data


def gateway_home(tmp_path: Path) -> tuple[Home, Journal]:
    """The data root ``tmp_path/home``, made, and its journal: all a gateway writes to."""
    home = Home(tmp_path / "home")
    home.root.mkdir(parents=True, exist_ok=True)
    return home, Journal(home.journal)


def serve_on_loopback(
    tmp_path: Path,
    upstream: Upstream,
    *,
    run_id: str = RUN_ID,
    upstream_ca_file: str | None = None,
    **extra: Any,
) -> Served:
    """A gateway for ``run_id`` with the data root ``tmp_path/home``; ``extra`` overrides
    keys of its ``[gateway]`` policy."""
    listener, port = loopback_listener(128)
    home, journal = gateway_home(tmp_path)
    gateway = Gateway.start(
        gateway_policy(upstream.port, port, **extra),
        home=home,
        imp="yuko",
        run_id=run_id,
        journal=journal,
        upstream_ca_file=upstream_ca_file,
    )
    gateway.serve(listener)
    return Served(gateway, port, journal, home)


def via_proxy(
    port: int,
    method: str,
    url: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(method, url, body=body, headers=headers or {})
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        conn.close()
