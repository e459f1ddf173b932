"""The scripted model server: one protocol, one script, every request recorded."""

from __future__ import annotations

import json
import socket
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from impyard.devtools.model_server.protocols import PROTOCOLS, ModelApi
from impyard.devtools.model_server.script import Conversation, Script


@dataclass
class Received:
    """One request as the server saw it (tests check what reached the provider)."""

    method: str
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    #: The conversation a model call carried; None for any other request.
    conversation: Conversation | None = None


@dataclass
class ModelServer:
    """Serve ``script`` over ``protocol`` on ``host:port`` (0 picks a free port), or on a
    listening ``sock``."""

    script: Script
    host: str = "127.0.0.1"
    port: int = 0
    model: str = "scripted-model"
    sock: socket.socket | None = None
    protocol: str = "openai-chat"
    received: list[Received] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None
    _released: threading.Event = field(default_factory=threading.Event)

    @property
    def api(self) -> ModelApi:
        return PROTOCOLS[self.protocol]

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://{self.host}:{self._server.server_address[1]}"

    def start(self) -> ModelServer:
        handler = _handler_for(self, self.api)
        if self.sock is not None:
            server = ThreadingHTTPServer(("127.0.0.1", 0), handler, bind_and_activate=False)
            server.socket.close()
            server.socket = self.sock
            server.server_address = self.sock.getsockname()[:2]
        else:
            server = ThreadingHTTPServer((self.host, self.port), handler)
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._released.set()  # stalled replies end
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(5)

    def __enter__(self) -> ModelServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def turns(self) -> list[Received]:
        """The model calls received (each one turn of the script), in order."""
        return [r for r in self.received if r.conversation is not None]

    #: The name the OpenAI-chat tests have always used.
    completions = turns


def _handler_for(server: ModelServer, api: ModelApi) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            del format, args

        def do_HEAD(self) -> None:
            self._other("HEAD", {})

        def do_GET(self) -> None:
            self._other("GET", {})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                self._json(400, api.error(400, "body is not JSON"))
                return
            if not isinstance(body, dict):
                self._json(400, api.error(400, "body is not a JSON object"))
                return
            if not api.is_model_call("POST", self.path):
                self._other("POST", body)
                return
            conversation = api.conversation(body, self.path)
            headers = {k.lower(): v for k, v in self.headers.items()}
            server.received.append(Received("POST", self.path, headers, body, conversation))
            reply = server.script(conversation)
            if reply.delay > 0:
                server._released.wait(reply.delay)
            if reply.hang:
                server._released.wait()
                self.close_connection = True
                return
            if reply.status != 200:
                self._json(reply.status, api.error(reply.status, reply.text))
                return
            self._stream(reply, api.model(body, self.path) or server.model)

        def _other(self, method: str, body: dict[str, Any]) -> None:
            headers = {k.lower(): v for k, v in self.headers.items()}
            server.received.append(Received(method, self.path, headers, body))
            answer = api.other(method, self.path, body, server.model)
            if answer is None:
                self._json(404, api.error(404, f"no route {self.path}"))
            else:
                self._json(*answer)

        def _json(self, status: int, doc: Any) -> None:
            data = json.dumps(doc).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        def _stream(self, reply: Any, model: str) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            for piece in api.stream(reply, model):
                self.wfile.write(piece)
                self.wfile.flush()

    return Handler
