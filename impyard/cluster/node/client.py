"""The cluster API from a node: every request with the cluster token and this agent's id."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO, cast
from urllib.parse import urlencode, urlsplit

from pydantic import BaseModel

from impyard.cluster.protocol import API, RELAY_PROTOCOL, ExitReport, FileKind
from impyard.common.errors import ImpyardError

_TIMEOUT = 30.0
_MAX_ANSWER = 1 << 20


class ClusterCallError(ImpyardError):
    """The control plane refused a call or could not be reached."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class ClusterClient:
    def __init__(self, url: str, token: str, agent: str) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise ClusterCallError(f"cluster URL must be http://host:port, not {url!r}")
        self.host, self.port = parts.hostname, parts.port or 80
        self.token = token
        self.agent = agent

    def _headers(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        return {
            "Authorization": f"Bearer {self.token}",
            "X-Impyard-Agent": self.agent,
            **(extra or {}),
        }

    def call(
        self,
        method: str,
        path: str,
        body: BaseModel | dict[str, Any] | bytes | None = None,
        *,
        query: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        timeout: float = _TIMEOUT,
    ) -> dict[str, Any] | None:
        """One call; its JSON answer (None for 204)."""
        if isinstance(body, BaseModel):
            data = body.model_dump_json().encode()
        elif isinstance(body, dict):
            data = json.dumps(body).encode()
        else:
            data = body or b""
        target = API + path + (f"?{urlencode(query)}" if query else "")
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            conn.request(method, target, body=data, headers=self._headers(headers))
            answer = conn.getresponse()
            raw = answer.read(_MAX_ANSWER)
        except OSError as exc:
            raise ClusterCallError(f"cluster API at {self.host}:{self.port}: {exc}") from exc
        finally:
            conn.close()
        if answer.status == 204:
            return None
        parsed = json.loads(raw) if raw else {}
        if answer.status >= 300:
            raise ClusterCallError(str(parsed.get("error", raw[:500])), answer.status)
        return parsed if isinstance(parsed, dict) else {}

    def fetch(self, run_id: str, token: str, kind: FileKind, dest: Path, limit: int) -> None:
        """A run's file into ``dest`` (at most ``limit`` bytes)."""
        with self.answer("GET", f"/runs/{run_id}/files/{kind}", token, b"", limit) as answer:
            fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
            with os.fdopen(fd, "wb") as out:
                while chunk := answer.read(1 << 20):
                    out.write(chunk)

    @contextlib.contextmanager
    def answer(
        self, method: str, path: str, token: str, body: bytes, limit: int
    ) -> Iterator[BinaryIO]:
        """The answer to ``method`` on a run's ``path``, read as it arrives (at most
        ``limit`` bytes: a longer answer is refused before any of it is read)."""
        kind = path.rsplit("/", 1)[-1]
        run_id = path.split("/")[2]
        target = f"{API}{path}?{urlencode({'token': token})}"
        conn = http.client.HTTPConnection(self.host, self.port, timeout=_TIMEOUT)
        try:
            conn.request(method, target, body=body, headers=self._headers())
            answer = conn.getresponse()
            if answer.status != 200:
                raise ClusterCallError(
                    f"{kind} of run {run_id}: {answer.read(2000)!r}", answer.status
                )
            size = int(answer.getheader("Content-Length", "0"))
            if size > limit:
                raise ClusterCallError(f"{kind} of run {run_id} is {size:,} bytes, over {limit:,}")
            yield cast(BinaryIO, answer)
        except OSError as exc:
            raise ClusterCallError(f"cluster API at {self.host}:{self.port}: {exc}") from exc
        finally:
            conn.close()

    def result(self, run_id: str, report: ExitReport, tree: Path | None) -> None:
        """The box's exit and its tree (streamed from the file, never held in memory)."""
        headers = self._headers({"X-Impyard-Exit": report.model_dump_json()})
        conn = http.client.HTTPConnection(self.host, self.port, timeout=120)
        try:
            if tree is None:
                conn.request("POST", f"{API}/runs/{run_id}/result", body=b"", headers=headers)
            else:
                with open(tree, "rb") as body:
                    headers["Content-Length"] = str(os.fstat(body.fileno()).st_size)
                    conn.request("POST", f"{API}/runs/{run_id}/result", body=body, headers=headers)
            answer = conn.getresponse()
            raw = answer.read(_MAX_ANSWER)
        except OSError as exc:
            raise ClusterCallError(f"cluster API at {self.host}:{self.port}: {exc}") from exc
        finally:
            conn.close()
        if answer.status >= 300:
            parsed = json.loads(raw) if raw.startswith(b"{") else {}
            reasons = parsed.get("reasons") or []
            text = str(parsed.get("error", raw[:500]))
            raise ClusterCallError(text + "".join(f"\n  {r}" for r in reasons), answer.status)

    def relay(self, run_id: str, token: str) -> socket.socket:
        """A connection the control plane hands to the run's gateway (after its 101)."""
        sock = socket.create_connection((self.host, self.port), timeout=_TIMEOUT)
        try:
            head = (
                f"GET {API}/runs/{run_id}/gateway?{urlencode({'token': token})} HTTP/1.1\r\n"
                f"Host: {self.host}\r\nAuthorization: Bearer {self.token}\r\n"
                f"X-Impyard-Agent: {self.agent}\r\nConnection: Upgrade\r\n"
                f"Upgrade: {RELAY_PROTOCOL}\r\n\r\n"
            )
            sock.sendall(head.encode())
            answer = b""
            while b"\r\n\r\n" not in answer:
                chunk = sock.recv(1)  # byte by byte: nothing past the head is consumed
                if not chunk or len(answer) > 8192:
                    raise ClusterCallError(f"relay for run {run_id}: no upgrade")
                answer += chunk
            if not answer.startswith(b"HTTP/1.1 101"):
                raise ClusterCallError(f"relay for run {run_id}: {answer[:200]!r}")
            sock.settimeout(None)
            return sock
        except BaseException:
            sock.close()
            raise
