"""HTTP/1.1 to the Docker engine's API, on the standard library alone.

The engine's API is plain HTTP and JSON on a unix socket (or TCP, with the CLI's
``DOCKER_TLS_VERIFY``/``DOCKER_CERT_PATH`` for TLS). Speaking it with ``http.client``
keeps a foreground ``impyard run`` from importing the docker SDK and requests (~60 ms
of a ~350 ms run on a 2-core machine) and saves ~0.5 ms per call; the calls a box
needs are few (see ``engineapi``).

Connections are kept alive and pooled: concurrent boxes each hold one in a long
``wait``. Errors come out as four kinds: :class:`EngineConnectError` (no connection
was made), :class:`EngineTimeout` (no answer in time), :class:`EngineHTTPError`
(the engine answered with an error status) and :class:`NotAnEngineAnswer`
(something answered, but not as an engine does); a connection dropped mid-request
raises the ``OSError`` or ``http.client`` error that says so.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import threading
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from impyard.box.docker.engineaddr import Endpoint, UnixConnection

#: Idle connections kept for reuse (concurrent waits each hold one while they wait).
POOL_SIZE = 32
#: What a JSON answer may hold; the engine is trusted, this only bounds a bug.
MAX_ANSWER_BYTES = 64 * 1024 * 1024
#: The header of one frame of a multiplexed (non-TTY) output stream: stream, 0, 0, 0, size.
FRAME_HEADER_BYTES = 8


class EngineConnectError(Exception):
    """No connection to the engine could be made (nothing was sent)."""

    def __init__(self, url: str, cause: OSError | ValueError) -> None:
        reason = cause.strerror if isinstance(cause, OSError) and cause.strerror else str(cause)
        super().__init__(f"cannot connect to {url}: {reason}")
        self.url = url
        self.reason = (reason or type(cause).__name__).lower()


class EngineTimeout(Exception):
    """The engine did not answer within the call's timeout."""


class AnswerTooLarge(Exception):
    """An answer was longer than the caller allows."""


class NotAnEngineAnswer(Exception):
    """Something answered at the engine's address, but not as a Docker engine does: an
    error status without the engine's JSON ``{"message": ...}``, or a call whose answer
    must be JSON answered with other bytes (a web server, a proxy's error page)."""

    def __init__(
        self, url: str, method: str, target: str, status: int, content_type: str | None
    ) -> None:
        kind = content_type.split(";")[0].strip() if content_type else ""
        super().__init__(f"HTTP {status} ({kind or 'no content type'}) for {method} {target}")
        self.url = url
        self.status = status
        self.content_type = content_type


@dataclass(frozen=True)
class Answered:
    """A whole answer: who gave it (the engine address), to what, its status, content type
    and body."""

    url: str
    method: str
    #: The API path (as errors name it), and the request target (prefix and query).
    path: str
    target: str
    status: int
    content_type: str | None
    data: bytes

    def not_an_engine(self) -> NotAnEngineAnswer:
        return NotAnEngineAnswer(self.url, self.method, self.target, self.status, self.content_type)


class EngineHTTPError(Exception):
    """The engine answered with an error status; ``explanation`` is its message."""

    def __init__(self, status: int, explanation: str, path: str) -> None:
        super().__init__(f"HTTP {status} for {path}: {explanation}")
        self.status = status
        self.explanation = explanation
        self.path = path

    @property
    def is_server_error(self) -> bool:
        return 500 <= self.status < 600


class Transport:
    """One engine endpoint, a pool of kept-alive connections, and the API version prefix."""

    def __init__(self, url: str, api_version: str, timeout: float) -> None:
        self.endpoint = Endpoint.parse(url)
        self.prefix = f"/v{api_version}"
        self.timeout = timeout
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()

    # -- connections -------------------------------------------------------------------

    def _connect(self, timeout: float | None) -> http.client.HTTPConnection:
        ep = self.endpoint
        conn: http.client.HTTPConnection
        if ep.socket_path is not None:
            conn = UnixConnection(ep.socket_path, timeout or self.timeout)
        elif ep.tls is not None:
            conn = http.client.HTTPSConnection(
                ep.host, ep.port, timeout=timeout or self.timeout, context=ep.tls
            )
        else:
            conn = http.client.HTTPConnection(ep.host, ep.port, timeout=timeout or self.timeout)
        try:
            conn.connect()
        except OSError as exc:
            conn.close()
            raise EngineConnectError(ep.url, exc) from exc
        return conn

    def _take(self) -> tuple[http.client.HTTPConnection, bool]:
        with self._lock:
            if self._idle:
                return self._idle.pop(), True
        return self._connect(None), False

    def _give_back(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if len(self._idle) < POOL_SIZE:
                if conn.sock is not None:
                    conn.sock.settimeout(self.timeout)
                self._idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    # -- requests ----------------------------------------------------------------------

    def url(self, path: str, query: dict[str, Any] | None = None) -> str:
        target = self.prefix + path
        if query:
            pairs = {k: _query_value(v) for k, v in query.items() if v is not None}
            target += "?" + urllib.parse.urlencode(pairs)
        return target

    def _send(
        self,
        method: str,
        target: str,
        body: Any,
        timeout: float | None,
        headers: dict[str, str] | None = None,
    ) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        """Send one request and read the status; a kept-alive connection the engine closed
        while idle (the request never reached it) is replaced once by a new one."""
        payload = json.dumps(body).encode() if body is not None else None
        sent_headers = {"Content-Type": "application/json"} if payload is not None else {}
        sent_headers.update(headers or {})
        while True:
            conn, reused = self._take()
            try:
                with _closed_on_failure(conn, method, target):
                    if conn.sock is not None:
                        conn.sock.settimeout(timeout or self.timeout)
                    conn.request(method, target, body=payload, headers=sent_headers)
                    return conn, conn.getresponse()
            except (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected) as exc:
                if not reused:
                    raise
                del exc  # stale idle connection (closed on the way out): try a fresh one

    def request(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, Any] | None = None,
        body: Any = None,
        timeout: float | None = None,
    ) -> Any:
        """One call whose answer is JSON (or empty: None)."""
        answer = self.fetch(method, path, query=query, body=body, timeout=timeout)
        if not answer.data.strip():
            return None
        try:
            return json.loads(answer.data)
        except ValueError as exc:  # an engine answers JSON here; what answered is not one
            raise answer.not_an_engine() from exc

    def fetch(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, Any] | None = None,
        body: Any = None,
        timeout: float | None = None,
        limit: int = MAX_ANSWER_BYTES,
    ) -> Answered:
        """One call's whole answer (at most ``limit`` bytes of body: more is an error)."""
        target = self.url(path, query)
        conn, response = self._send(method, target, body, timeout)
        with _closed_on_failure(conn, method, target):
            data = response.read(limit + 1)
            if len(data) > limit:
                raise AnswerTooLarge(f"{path}: answer over {limit} bytes")
        if response.will_close:
            conn.close()
        else:
            self._give_back(conn)
        content_type = response.getheader("Content-Type")
        answer = Answered(
            self.endpoint.url, method, path, target, response.status, content_type, data
        )
        if response.status >= 400:
            raise _error(answer)
        return answer

    def stream(self, method: str, path: str, *, query: dict[str, Any] | None = None) -> RawStream:
        """A call whose answer is read as it comes (logs); the caller closes it."""
        target = self.url(path, query)
        conn, response = self._send(method, target, None, None)
        self._raise_for_error(conn, response, method, path, target)
        return RawStream(conn, response, response)

    def hijack(self, path: str, *, query: dict[str, Any] | None = None) -> RawStream:
        """POST ``path`` and take over the connection for the raw stream that follows
        (attach): the engine answers 101 and then writes frames until the box ends."""
        target = self.url(path, query)
        conn = self._connect(None)
        try:
            conn.request("POST", target, headers={"Connection": "Upgrade", "Upgrade": "tcp"})
            response = conn.getresponse()
        except BaseException:
            conn.close()
            raise
        self._raise_for_error(conn, response, "POST", path, target)
        if conn.sock is not None:
            conn.sock.settimeout(None)  # a box may be silent for as long as it runs
        # The raw stream follows the headers in the same buffered reader.
        assert response.fp is not None
        return RawStream(conn, response, response.fp)

    def _raise_for_error(
        self,
        conn: http.client.HTTPConnection,
        response: http.client.HTTPResponse,
        method: str,
        path: str,
        target: str,
    ) -> None:
        """A streamed call the engine refused: its message, and the connection closed."""
        if response.status >= 400:
            data = response.read(MAX_ANSWER_BYTES)
            conn.close()
            content_type = response.getheader("Content-Type")
            url = self.endpoint.url
            raise _error(Answered(url, method, path, target, response.status, content_type, data))


class RawStream:
    """A streamed answer; ``frames`` splits the engine's multiplexed output."""

    def __init__(
        self, conn: http.client.HTTPConnection, response: http.client.HTTPResponse, reader: Any
    ) -> None:
        self._conn = conn
        self._response = response
        self._reader = reader

    def read_exactly(self, size: int) -> bytes:
        """``size`` bytes, or fewer only at the end of the stream."""
        chunks: list[bytes] = []
        left = size
        while left > 0:
            chunk = self._reader.read(left)
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def frames(self) -> Iterator[bytes]:
        """The payloads of a non-TTY output stream, stdout and stderr interleaved."""
        while True:
            header = self.read_exactly(FRAME_HEADER_BYTES)
            if len(header) < FRAME_HEADER_BYTES:
                return
            size = int.from_bytes(header[4:8], "big")
            if size:
                data = self.read_exactly(size)
                if not data:
                    return
                yield data

    def close(self) -> None:
        """Ends the stream; a thread blocked reading it sees the end (shutdown first)."""
        sock = self._conn.sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self._response.close()
        self._conn.close()


@contextlib.contextmanager
def _closed_on_failure(
    conn: http.client.HTTPConnection, method: str, target: str
) -> Iterator[None]:
    """A call that fails part-way leaves its connection in no state to reuse: close it.
    A timeout says which call went unanswered."""
    try:
        yield
    except TimeoutError as exc:
        conn.close()
        raise EngineTimeout(f"no answer to {method} {target}") from exc
    except BaseException:
        conn.close()
        raise


def _error(answer: Answered) -> Exception:
    """An error answer: the engine's, with its message, or proof that no engine answered
    (every engine error carries a JSON ``message``; a web server's 404 page does not)."""
    message = _engine_message(answer.data)
    if message is None:
        return answer.not_an_engine()
    return EngineHTTPError(answer.status, message, answer.path)


def _query_value(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, dict | list):
        return json.dumps(value)
    return str(value)


def _engine_message(data: bytes) -> str | None:
    """The first line of the engine's error message (its JSON ``message``); None when the
    body is not the engine's error JSON."""
    try:
        message = json.loads(data.decode("utf-8", errors="replace")).get("message")
    except (ValueError, AttributeError):
        return None
    if not isinstance(message, str):
        return None
    first = message.strip().splitlines()
    return first[0] if first else "(no message)"
