"""Serving the console with uvicorn: in the foreground (``impyard web``) or on a thread
beside the worker (``impyard serve --web``).

The listening socket is bound here, before uvicorn starts, so an address in use is one
``UsageError`` line (uvicorn would log it and exit the process), and a test can ask for
port 0 and read the port it got.
"""

from __future__ import annotations

import socket
import threading
import time

import uvicorn

from impyard.common.errors import UsageError
from impyard.web.access.console import Console
from impyard.web.access.listen import Listen
from impyard.web.serving.app import build_app


def bind(listen: Listen) -> socket.socket:
    family = socket.AF_INET6 if ":" in listen.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((listen.host, listen.port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise UsageError(
            f"the console cannot listen on {listen.url}: {exc.strerror or exc}"
        ) from exc
    sock.set_inheritable(False)
    return sock


def bound_port(sock: socket.socket) -> int:
    return int(sock.getsockname()[1])


def _server(console: Console) -> uvicorn.Server:
    listen = console.listen
    config = uvicorn.Config(
        build_app(console),
        ssl_certfile=str(listen.tls_cert) if listen.tls_cert else None,
        ssl_keyfile=str(listen.tls_key) if listen.tls_key else None,
        log_level="warning",
        access_log=False,
        server_header=False,
        proxy_headers=False,
        lifespan="off",
        timeout_graceful_shutdown=2,
    )
    return uvicorn.Server(config)


def serve_forever(console: Console, sock: socket.socket) -> None:
    """Serve on ``sock`` until SIGINT or SIGTERM (uvicorn's own handlers)."""
    _server(console).run(sockets=[sock])


class Background:
    """The console on a daemon thread, for ``serve --web``; ``stop`` ends it."""

    def __init__(self, console: Console, sock: socket.socket) -> None:
        self.console = console
        self._server = _server(console)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, name="impyard-web", daemon=True
        )

    def start(self, timeout: float = 10.0) -> None:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started and self._thread.is_alive():
            if time.monotonic() > deadline:
                break
            time.sleep(0.02)
        if not self._server.started:
            raise UsageError(f"the console did not start on {self.console.listen.url}")

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=5)
