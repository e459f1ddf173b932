"""Addresses ``DOCKER_HOST`` may name where no Docker engine answers: a web server's 404
pages, a 200 HTML page for every path, or a listener that takes the connection and never
answers. No engine is needed; these servers are the point."""

from __future__ import annotations

import contextlib
import http.server
import socket
import threading
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Literal

Kind = Literal["404-html", "200-html", "silent"]


class HtmlEverywhere(http.server.BaseHTTPRequestHandler):
    """Answers every request 200 with an HTML page."""

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        body = b"<!DOCTYPE html><html><body>welcome</body></html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_DELETE = _answer

    def log_message(self, format: str, *args: object) -> None:
        del format, args


class QuietFiles(http.server.SimpleHTTPRequestHandler):
    """``python -m http.server``: 404 HTML pages for the engine's paths, 501 for POST."""

    def log_message(self, format: str, *args: object) -> None:
        del format, args


@contextlib.contextmanager
def fake_engine(kind: Kind, directory: Path) -> Iterator[str]:
    """The ``DOCKER_HOST`` of a server of ``kind``, until the block ends (``directory``:
    what the 404 server serves)."""
    if kind == "silent":
        with _silent() as url:
            yield url
        return
    handler: type[http.server.BaseHTTPRequestHandler] = (
        partial(QuietFiles, directory=str(directory))  # type: ignore[assignment]
        if kind == "404-html"
        else HtmlEverywhere
    )
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"tcp://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


@contextlib.contextmanager
def _silent() -> Iterator[str]:
    """Takes every connection and never answers (an engine stuck, or a port that swallows):
    a client waits out its own timeout."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stopping = threading.Event()

    def accept() -> None:
        while not stopping.is_set():
            try:
                conn, _addr = listener.accept()
            except OSError:
                return
            held.append(conn)

    thread = threading.Thread(target=accept, name="silent-engine", daemon=True)
    thread.start()
    try:
        yield f"tcp://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stopping.set()
        listener.shutdown(socket.SHUT_RDWR)
        listener.close()
        thread.join(10)
        for conn in held:
            conn.close()
