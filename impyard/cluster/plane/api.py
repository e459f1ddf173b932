"""The cluster API node agents talk to. Every request must carry the cluster token;
nothing is served without it. Bodies are bounded before they are read; a message about a
run counts only under that run's live lease (``hub``)."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import socket
import tempfile
import threading
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import IO, Any
from urllib.parse import parse_qs, urlsplit

from pydantic import BaseModel, ValidationError

from impyard.cluster.plane.hub import Hub, NoNode, StaleLease
from impyard.cluster.plane.token import token_matches
from impyard.cluster.protocol import (
    API,
    MAX_TREE_BYTES,
    RELAY_PROTOCOL,
    ExitReport,
    NodeReport,
    Refusal,
    Started,
)
from impyard.cluster.treetar import TreeRefused, judge, pack

log = logging.getLogger(__name__)

_MAX_MESSAGE = 1 << 20
#: The most of an origin update packed in memory before it spills to disk.
_ORIGIN_IN_MEMORY = 8 << 20
#: The most a node's list of the origin files it holds may take.
_MAX_HAVE = 32 << 20
_RUN_PATH = re.compile(rf"^{API}/runs/([A-Za-z0-9_-]{{1,80}})/([a-z]+)(?:/([a-z]+))?$")
_LEASE_WAIT_MAX = 10.0

#: Hands a relayed box connection to its run's gateway; False when the run has none.
Adopt = Callable[[str, socket.socket], bool]


class ClusterServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], hub: Hub, adopt: Adopt) -> None:
        self.hub = hub
        self.adopt = adopt
        self._adopted: set[int] = set()
        self._adopted_lock = threading.Lock()
        super().__init__(address, _Handler)

    def keep_open(self, request: socket.socket) -> None:
        with self._adopted_lock:
            self._adopted.add(id(request))

    def shutdown_request(self, request: Any) -> None:
        with self._adopted_lock:
            if id(request) in self._adopted:
                self._adopted.discard(id(request))
                return  # the run's gateway owns it now
        super().shutdown_request(request)


def start_server(hub: Hub, listen: str, adopt: Adopt) -> ClusterServer:
    host, port = listen.rsplit(":", 1)
    server = ClusterServer((host, int(port)), hub, adopt)
    threading.Thread(target=server.serve_forever, name="cluster-api", daemon=True).start()
    return server


class _Handler(BaseHTTPRequestHandler):
    server: ClusterServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("cluster api: " + format, *args)

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def _dispatch(self, method: str) -> None:
        if not token_matches(self.server.hub.token, self.headers.get("Authorization")):
            self._answer(
                HTTPStatus.UNAUTHORIZED, Refusal(error="the cluster token is missing or wrong")
            )
            return
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        try:
            self._route(method, url.path, query)
        except StaleLease as exc:
            self._answer(HTTPStatus.CONFLICT, Refusal(error=str(exc)))
        except (ValidationError, ValueError) as exc:
            self._answer(HTTPStatus.BAD_REQUEST, Refusal(error=f"bad request: {exc}"[:2000]))
        except NoNode as exc:  # pragma: no cover - placement is not an API call
            self._answer(HTTPStatus.SERVICE_UNAVAILABLE, Refusal(error=str(exc)))
        except Exception:
            log.exception("cluster api: %s %s failed", method, url.path)
            self._answer(HTTPStatus.INTERNAL_SERVER_ERROR, Refusal(error="internal error"))

    def _route(self, method: str, path: str, query: dict[str, str]) -> None:
        hub = self.server.hub
        agent = self.headers.get("X-Impyard-Agent", "")[:80]
        if method == "POST" and path == f"{API}/heartbeat":
            report = NodeReport.model_validate_json(self._body(_MAX_MESSAGE))
            self._answer(HTTPStatus.OK, hub.heartbeat(report, agent))
            return
        if method == "POST" and path == f"{API}/lease":
            asked = json.loads(self._body(_MAX_MESSAGE) or b"{}")
            wait = min(float(asked.get("wait", 0)), _LEASE_WAIT_MAX)
            assignment = hub.take(str(asked.get("node", "")), agent, wait)
            if assignment is None:
                self._answer(HTTPStatus.NO_CONTENT, None)
                return
            try:
                self._answer(HTTPStatus.OK, assignment)
                self.wfile.flush()
            except OSError:  # the node went away: nothing more to say to it
                hub.untake(assignment.run_id, assignment.token)
                self.close_connection = True
            return
        match = _RUN_PATH.match(path)
        if match is None:
            self._answer(HTTPStatus.NOT_FOUND, Refusal(error=f"no such path: {path[:200]}"))
            return
        run_id, what, kind = match.groups()
        token = query.get("token", "")
        if method == "GET" and what == "files" and kind in ("checkout", "task", "ca"):
            self._send_file(hub.file(run_id, token, kind))  # type: ignore[arg-type]
        elif method == "POST" and what == "origin":
            self._send_origin(run_id, token)
        elif method == "POST" and what == "started":
            hub.started(run_id, Started.model_validate_json(self._body(_MAX_MESSAGE)))
            self._answer(HTTPStatus.OK, {})
        elif method == "POST" and what == "output":
            position = hub.output(
                run_id, token, int(query.get("offset", "0")), self._body(_MAX_MESSAGE)
            )
            self._answer(HTTPStatus.OK, {"position": position})
        elif method == "POST" and what == "result":
            self._result(run_id)
        elif method == "GET" and what == "gateway":
            self._relay(run_id, token)
        else:
            self._answer(HTTPStatus.NOT_FOUND, Refusal(error=f"no such path: {path[:200]}"))

    def _result(self, run_id: str) -> None:
        report = ExitReport.model_validate_json(self.headers.get("X-Impyard-Exit", ""))
        hub = self.server.hub
        hub.gateway_for(run_id, report.token)  # refused before the body is read
        length = self._length(MAX_TREE_BYTES)
        tree: Path | None = None
        if length:
            tree = hub.home.run_dir(run_id) / "returned-tree.tar"
            fd = os.open(tree, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "wb") as out:
                _copy_exactly(self.rfile, out, length)
        refusal: TreeRefused | None = None
        if tree is not None:
            try:
                judge(tree, MAX_TREE_BYTES)
            except TreeRefused as exc:
                # Refused whole, before the run sees it; the run ends quarantined, saying why.
                refusal = exc
                tree.unlink()
                tree = None
                report = report.model_copy(update={"tree_error": str(exc)[:5000]})
        try:
            hub.result(run_id, report, tree)
        except StaleLease:
            if tree is not None:
                tree.unlink(missing_ok=True)
            raise
        if refusal is not None:
            self._answer(
                HTTPStatus.UNPROCESSABLE_ENTITY,
                Refusal(error="the returned tree is refused", reasons=refusal.reasons[:100]),
            )
            return
        self._answer(HTTPStatus.OK, {})

    def _relay(self, run_id: str, token: str) -> None:
        self.server.hub.gateway_for(run_id, token)
        if self.headers.get("Upgrade", "").lower() != RELAY_PROTOCOL:
            self._answer(
                HTTPStatus.BAD_REQUEST, Refusal(error=f"expected Upgrade: {RELAY_PROTOCOL}")
            )
            return
        self.send_response(HTTPStatus.SWITCHING_PROTOCOLS)
        self.send_header("Upgrade", RELAY_PROTOCOL)
        self.send_header("Connection", "Upgrade")
        self.end_headers()
        self.wfile.flush()
        self.close_connection = True
        conn = self.connection
        self.server.keep_open(conn)
        if not self.server.adopt(run_id, conn):
            conn.close()

    def _send_origin(self, run_id: str, token: str) -> None:
        """The run's published origin, less what the node's copy already holds."""
        hub = self.server.hub
        origin = hub.file(run_id, token, "origin")
        asked = json.loads(self._body(_MAX_HAVE) or b"{}")
        have = asked.get("have") if isinstance(asked, dict) else None
        if not isinstance(have, dict):
            raise ValueError('expected {"have": {path: size}}')
        held = {str(k): int(v) for k, v in have.items()}
        # Most updates are one run's objects and the refs: packed in memory, and on disk
        # only past a bound.
        spill = str(hub.home.run_dir(run_id))
        with tempfile.SpooledTemporaryFile(_ORIGIN_IN_MEMORY, mode="w+b", dir=spill) as spool:
            pack(origin, spool, MAX_TREE_BYTES, live_repo=True, have=held)
            size = spool.tell()
            spool.seek(0)
            self._send(spool, size)

    def _length(self, limit: int) -> int:
        length = int(self.headers.get("Content-Length", "0"))
        if length < 0 or length > limit:
            raise ValueError(f"a body of {length:,} bytes is over the {limit:,} this path takes")
        return length

    def _body(self, limit: int) -> bytes:
        return self.rfile.read(self._length(limit))

    def _send_file(self, path: Path) -> None:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as source:
            self._send(source, os.fstat(source.fileno()).st_size)

    def _send(self, source: IO[bytes], size: int) -> None:
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(size))
        self.end_headers()
        shutil.copyfileobj(source, self.wfile, 1 << 20)

    def _answer(self, status: HTTPStatus, body: BaseModel | dict[str, Any] | None) -> None:
        if isinstance(body, BaseModel):
            data = body.model_dump_json().encode()
        else:
            data = b"" if body is None else json.dumps(body).encode()
        self.send_response(status)
        if data:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if data:
            self.wfile.write(data)


def _copy_exactly(source: Any, out: Any, length: int) -> None:
    left = length
    while left:
        chunk = source.read(min(left, 1 << 20))
        if not chunk:
            raise ValueError(f"the body ended {left:,} bytes short")
        out.write(chunk)
        left -= len(chunk)
