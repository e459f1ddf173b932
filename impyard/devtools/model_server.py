"""A scripted OpenAI-compatible model server for driving the real Pi agent.

Pi calls ``POST <baseUrl>/chat/completions`` with ``stream: true`` and reads
Server-Sent Events of ``chat.completion.chunk``. This server answers the same
wire protocol from a *script*: a function of the conversation so far (the
messages Pi sent) that returns the next reply — text, tool calls, an HTTP
error, or a hang — optionally after a pause (``Reply.after``), as a slow model
thinks. Tool-call arguments are streamed split across several
chunks, as real providers do, so Pi's incremental parser is exercised.

Stdlib only: tests, the demo and the agent bench all use it. Run it alone with
``python -m impyard.devtools.model_server`` (the demo does) to serve the ``note`` script.
"""

from __future__ import annotations

import argparse
import json
import re
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class Reply:
    """What the model says next: text, tool calls, an HTTP error, or nothing at all (hang);
    ``delay`` seconds pass before the answer starts."""

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    status: int = 200
    hang: bool = False
    delay: float = 0.0

    @classmethod
    def say(cls, text: str) -> Reply:
        return cls(text=text)

    @classmethod
    def call(cls, name: str, **arguments: Any) -> Reply:
        return cls(tool_calls=(ToolCall(name, arguments),))

    @classmethod
    def error(cls, status: int, text: str = "scripted failure") -> Reply:
        return cls(text=text, status=status)

    @classmethod
    def stall(cls) -> Reply:
        return cls(hang=True)

    def after(self, seconds: float) -> Reply:
        """This reply, once ``seconds`` have passed (the server stopping ends the wait)."""
        return replace(self, delay=seconds)


@dataclass
class Conversation:
    """The messages of one request, with the questions a script asks of them."""

    messages: list[dict[str, Any]]

    @property
    def turn(self) -> int:
        """How many assistant turns came before this request (0 for the first)."""
        return sum(1 for m in self.messages if m.get("role") == "assistant")

    def tool_results(self) -> list[str]:
        return [_text(m.get("content")) for m in self.messages if m.get("role") == "tool"]

    def last_tool_result(self) -> str:
        results = self.tool_results()
        return results[-1] if results else ""

    def system(self) -> str:
        return "\n".join(
            _text(m.get("content"))
            for m in self.messages
            if m.get("role") in ("system", "developer")
        )

    def user(self) -> str:
        return "\n".join(_text(m.get("content")) for m in self.messages if m.get("role") == "user")


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


Script = Callable[[Conversation], Reply]


@dataclass
class Received:
    """One request as the server saw it (tests check what reached the provider)."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]


@dataclass
class ModelServer:
    """Serve ``script`` on ``host:port`` (0 picks a free port), or on a listening ``sock``."""

    script: Script
    host: str = "127.0.0.1"
    port: int = 0
    model: str = "scripted-model"
    sock: socket.socket | None = None
    received: list[Received] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None
    _released: threading.Event = field(default_factory=threading.Event)

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://{self.host}:{self._server.server_address[1]}"

    def start(self) -> ModelServer:
        handler = _handler_for(self)
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

    def completions(self) -> list[Received]:
        return [r for r in self.received if r.path.endswith("/chat/completions")]


def _handler_for(server: ModelServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            del format, args

        def do_GET(self) -> None:
            if self.path.rstrip("/").endswith("/models"):
                self._json(200, {"object": "list", "data": [{"id": server.model}]})
            else:
                self._json(404, {"error": {"message": f"no route {self.path}"}})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                self._json(400, {"error": {"message": "body is not JSON"}})
                return
            server.received.append(
                Received(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
            )
            if not self.path.endswith("/chat/completions"):
                self._json(404, {"error": {"message": f"no route {self.path}"}})
                return
            reply = server.script(Conversation(list(body.get("messages") or [])))
            if reply.delay > 0:
                server._released.wait(reply.delay)
            if reply.hang:
                server._released.wait()
                self.close_connection = True
                return
            if reply.status != 200:
                self._json(reply.status, {"error": {"message": reply.text, "type": "scripted"}})
                return
            self._stream(reply, str(body.get("model") or server.model))

        def _json(self, status: int, doc: dict[str, Any]) -> None:
            data = json.dumps(doc).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _stream(self, reply: Reply, model: str) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            for chunk in sse_chunks(reply, model):
                self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                self.wfile.flush()
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()

    return Handler


def _pieces(text: str, size: int) -> Iterator[str]:
    for start in range(0, len(text), size):
        yield text[start : start + size]


def sse_chunks(reply: Reply, model: str) -> Iterator[dict[str, Any]]:
    """The ``chat.completion.chunk`` objects of one streamed reply."""
    ident = f"chatcmpl-{uuid.uuid4().hex[:12]}"
    created = int(time.time())

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": ident,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    yield chunk({"role": "assistant", "content": ""})
    for piece in _pieces(reply.text, 7):
        yield chunk({"content": piece})
    for index, call in enumerate(reply.tool_calls):
        yield chunk(
            {
                "tool_calls": [
                    {
                        "index": index,
                        "id": f"call_{uuid.uuid4().hex[:10]}",
                        "type": "function",
                        "function": {"name": call.name, "arguments": ""},
                    }
                ]
            }
        )
        # Split mid-token, as providers do: Pi must join the pieces before parsing.
        for piece in _pieces(json.dumps(call.arguments), 9):
            yield chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    yield chunk({}, "tool_calls" if reply.tool_calls else "stop")
    usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    yield {
        "id": ident,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [],
        "usage": usage,
    }


# -- scripts -----------------------------------------------------------------------

NAMESPACE = re.compile(r"\bn_[0-9a-f]{12}\b")


def write_note(namespace: str, topic: str, slug: str, source: str, body: str) -> Reply:
    """A ``write`` tool call of note 1 of ``namespace``, with valid frontmatter."""
    note = (
        f"---\nid: {namespace}_1\ncreated_at: 2026-12-01T12:00:00Z\n"
        f"source_urls:\n- {source}\n---\n\n# {slug}\n\n{body}"
    )
    return Reply.call(
        "write",
        path=f"/opt/impyard/knowledge/records/{topic}/{slug}--{namespace}_1.md",
        content=note,
    )


def note_script(topic: str = "pi", slug: str = "first-note", body: str = "") -> Script:
    """Read the namespace with ``bash``, ``write`` one valid note with it, then stop."""

    def script(conversation: Conversation) -> Reply:
        if conversation.turn == 0:
            return Reply.call("bash", command="echo ns=$IMPYARD_KNOWLEDGE_NAMESPACE")
        match = NAMESPACE.search(conversation.last_tool_result())
        if conversation.turn == 1 and match:
            text = body or "Pi wrote this note through the scripted model server.\n"
            return write_note(match.group(0), topic, slug, f"https://example.com/{slug}", text)
        if conversation.turn == 1:
            return Reply.say("I could not read my namespace.")
        return Reply.say("Wrote one note.")

    return script


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    server = ModelServer(note_script(), host=args.host, port=args.port).start()
    print(server.url, flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
