"""The governed gateway: an HTTP/1.1 forward proxy a box reaches on its own loopback.

The listening socket lives in the box's network namespace (see ``netns``);
every thread that accepts, judges and forwards runs in the host's namespace,
so upstream connections leave from the host and nothing in the box has any
other way out. Each connection gets its own thread, bounded by a semaphore.
"""

from __future__ import annotations

import contextlib
import http.client
import logging
import selectors
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from socketserver import BaseServer
from typing import Any, cast
from urllib.parse import urlsplit

from impyard.fsutil import atomic_write_text
from impyard.gateway.budget import DailyCounter, Refusal, RunBudget
from impyard.gateway.errors import GatewayError
from impyard.gateway.netns import listen_in_netns
from impyard.gateway.rules import GatewayRules, normalize_host
from impyard.gateway.upstream import UpstreamError, open_connection
from impyard.home import Home
from impyard.journal import Journal
from impyard.names import check_imp_name

log = logging.getLogger(__name__)

# Where the box sees the host's signal dir, and the file box-init waits for.
BOX_SIGNAL_DIR = "/opt/impyard/signal"
READY_FILE = "gateway.ready"
BOX_READY_PATH = f"{BOX_SIGNAL_DIR}/{READY_FILE}"
WAIT_FOR_ENV = "IMPYARD_WAIT_FOR"
NO_PROXY = "127.0.0.1,localhost,::1"

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "expect",  # answered here (100-continue); never forwarded
    }
)
_CHUNK = 65536
_MAX_CHUNK_LINE = 1024


def write_ready(signal_dir: Path) -> Path:
    """Tell the box its gateway is listening: box-init waits for this file before the imp runs."""
    path = signal_dir / READY_FILE
    atomic_write_text(path, "ready\n")
    path.chmod(0o644)
    return path


@dataclass
class _Record:
    """What the journal keeps about one request: never a body, header value or secret."""

    method: str
    host: str = ""
    port: int = 0
    path: str = ""
    route: str | None = None
    decision: str = "refused"
    rule: str = ""
    status: int = 0
    bytes: int = 0
    reason: str | None = None
    started: float = field(default_factory=time.monotonic)


class _Refused(Exception):
    def __init__(self, status: int, rule: str, reason: str, decision: str = "refused") -> None:
        super().__init__(reason)
        self.status = status
        self.rule = rule
        self.reason = reason
        self.decision = decision


class Gateway:
    """One run's gateway. ``start`` → ``attach(pid)`` → ``proxy_env()`` for the box → ``close``."""

    def __init__(
        self,
        rules: GatewayRules,
        *,
        home: Home,
        imp: str,
        run_id: str,
        journal: Journal,
        max_workers: int = 64,
        client_timeout: float = 60.0,
        upstream_timeout: float = 120.0,
        tunnel_idle_timeout: float = 300.0,
    ) -> None:
        self.rules = rules
        self.home = home
        self.imp = imp
        self.run_id = run_id
        self.journal = journal
        self.budget = RunBudget(rules.budget, DailyCounter(home, imp))
        self.client_timeout = client_timeout
        self.upstream_timeout = upstream_timeout
        self.tunnel_idle_timeout = tunnel_idle_timeout
        self._slots = threading.BoundedSemaphore(max_workers)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._accept_thread: threading.Thread | None = None
        self._active: set[socket.socket] = set()
        self._workers: set[threading.Thread] = set()
        self._closed = False

    @classmethod
    def start(
        cls,
        rules: GatewayRules,
        *,
        home: Home,
        imp: str,
        run_id: str,
        journal: Journal,
        **options: Any,
    ) -> Gateway:
        """Prepare a run's gateway; it serves nothing until ``attach``."""
        check_imp_name(imp)  # it names the daily counter's directory
        gateway = cls(rules, home=home, imp=imp, run_id=run_id, journal=journal, **options)
        if rules.enabled:
            try:
                home.gateway_dir.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise GatewayError(f"gateway: cannot create {home.gateway_dir}: {exc}") from exc
        return gateway

    @property
    def port(self) -> int:
        return self.rules.port

    @property
    def serving(self) -> bool:
        return self._listener is not None and not self._stop.is_set()

    def attach(self, pid: int) -> None:
        """Bind the listener on the loopback of ``pid``'s netns and start serving (fail closed)."""
        if not self.rules.enabled:
            return
        if self._closed:
            raise GatewayError("gateway: attach after close")
        try:
            listener = listen_in_netns(pid, "127.0.0.1", self.rules.port)
        except GatewayError as exc:
            raise GatewayError(
                f"gateway for run {self.run_id}: cannot listen on 127.0.0.1:{self.rules.port} "
                f"in the box (pid {pid}): {exc}"
            ) from exc
        self.serve(listener)

    def serve(self, listener: socket.socket) -> None:
        """Serve on an already-listening socket (``attach`` makes one inside the box)."""
        with self._lock:
            if self._listener is not None or self._closed:
                listener.close()
                raise GatewayError("gateway: already serving or closed")
            listener.settimeout(0.5)  # the accept loop wakes to notice close()
            self._listener = listener
            self._accept_thread = threading.Thread(
                target=self._accept_loop, name=f"gateway-{self.run_id}", daemon=True
            )
            self._accept_thread.start()

    def proxy_env(self) -> dict[str, str]:
        """Environment for the box; empty when the gateway is disabled."""
        if not self.rules.enabled:
            return {}
        url = f"http://127.0.0.1:{self.rules.port}"
        return {
            "HTTP_PROXY": url,
            "HTTPS_PROXY": url,
            "http_proxy": url,
            "https_proxy": url,
            # The box's loopback holds nothing but the gateway, so loopback names go direct:
            # a credential route is a plain request to 127.0.0.1:<port>. Node's undici
            # (EnvHttpProxyAgent) otherwise tunnels even http:// targets with a CONNECT to
            # the gateway itself, which is refused. Lowercase is read first by most clients.
            "NO_PROXY": NO_PROXY,
            "no_proxy": NO_PROXY,
        }

    def close(self) -> None:
        """Stop accepting, cut open connections and tunnels, wait briefly for workers."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._stop.set()
            listener, self._listener = self._listener, None
            active = list(self._active)
            workers = list(self._workers)
            accept_thread = self._accept_thread
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        for conn in active:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        if accept_thread is not None:
            accept_thread.join(5)
        for worker in workers:
            worker.join(5)

    def __enter__(self) -> Gateway:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- serving -------------------------------------------------------------

    def _accept_loop(self) -> None:
        listener = self._listener
        assert listener is not None
        while not self._stop.is_set():
            if not self._slots.acquire(timeout=0.5):
                continue
            try:
                conn, _addr = listener.accept()
            except TimeoutError:
                self._slots.release()
                continue
            except OSError as exc:
                self._slots.release()
                if self._stop.is_set():
                    break
                log.warning("gateway %s: accept failed: %s", self.run_id, exc)
                self._stop.wait(0.1)  # e.g. EMFILE: back off instead of spinning
                continue
            thread = threading.Thread(
                target=self._serve_connection, args=(conn,), name="gateway-conn", daemon=True
            )
            with self._lock:
                if self._closed:
                    conn.close()
                    self._slots.release()
                    break
                self._active.add(conn)
                self._workers.add(thread)
            thread.start()

    @contextlib.contextmanager
    def tracked(self, sock: socket.socket) -> Iterator[socket.socket]:
        """Cut ``sock`` on close() too: an upstream that never answers must not hold a
        worker (and the run's end) until its read timeout."""
        with self._lock:
            self._active.add(sock)
        try:
            yield sock
        finally:
            with self._lock:
                self._active.discard(sock)

    def _serve_connection(self, conn: socket.socket) -> None:
        try:
            conn.settimeout(self.client_timeout)
            _Handler(conn, self)
        except Exception:
            log.exception("gateway %s: connection failed", self.run_id)
        finally:
            with contextlib.suppress(OSError):
                conn.close()
            with self._lock:
                self._active.discard(conn)
                self._workers.discard(threading.current_thread())
            self._slots.release()

    def record(self, rec: _Record) -> None:
        fields: dict[str, Any] = {
            "run": self.run_id,
            "imp": self.imp,
            "method": rec.method,
            "host": rec.host,
            "port": rec.port,
            "path": rec.path,
            "route": rec.route,
            "decision": rec.decision,
            "rule": rec.rule,
            "status": rec.status,
            "bytes": rec.bytes,
            "duration_ms": round((time.monotonic() - rec.started) * 1000, 1),
        }
        if rec.reason is not None:
            fields["reason"] = rec.reason
        try:
            self.journal.record("gateway.request", **fields)
        except OSError:
            log.exception("gateway %s: journal write failed", self.run_id)


class _Handler(BaseHTTPRequestHandler):
    """One client connection; requests are parsed by the stdlib, judged and forwarded here."""

    protocol_version = "HTTP/1.1"
    server_version = "impyard-gateway"
    sys_version = ""

    def __init__(self, conn: socket.socket, gateway: Gateway) -> None:
        self.gateway = gateway
        self._responded = False
        # The stdlib handler never consults ``server`` for what this class does.
        super().__init__(conn, ("box", 0), cast(BaseServer, None))

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("gateway %s: " + format, self.gateway.run_id, *args)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        # Malformed requests: a one-line plain-text answer instead of the stdlib's HTML page.
        self._send_text(code, f"impyard gateway: {message or 'bad request'}", rule="http")

    def handle_one_request(self) -> None:
        try:
            self.raw_requestline = self.rfile.readline(65537)
        except (TimeoutError, ConnectionError):
            self.close_connection = True
            return
        if not self.raw_requestline:
            self.close_connection = True
            return
        if len(self.raw_requestline) > 65536:
            self.send_error(414, "request line too long")
            return
        self._responded = False
        if not self.parse_request():
            return
        rec = _Record(method=self.command.upper())
        try:
            self._serve(rec)
        except _Refused as refusal:
            rec.rule, rec.reason, rec.decision = refusal.rule, refusal.reason, refusal.decision
            if not self._responded:
                rec.status = refusal.status
            if not self._responded:
                self._send_text(refusal.status, f"impyard gateway: {refusal.reason}", refusal.rule)
            else:
                self.close_connection = True  # mid-body: cutting the connection is the signal
        except (TimeoutError, ConnectionError) as exc:
            rec.decision, rec.reason = "failed", f"connection ended: {type(exc).__name__}"
            rec.status = rec.status or 502
            self.close_connection = True
        finally:
            self.gateway.record(rec)

    # -- responses -------------------------------------------------------------

    def _send_text(self, status: int, line: str, rule: str) -> None:
        body = (line.replace("\r", " ").replace("\n", " ") + "\n").encode()
        with contextlib.suppress(OSError):
            self.send_response_only(status)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("X-Impyard-Gateway-Rule", rule)
            if status in (403, 429):
                # A policy refusal does not change on a retry: OpenAI-style SDKs honour this
                # header instead of retrying into a spent budget.
                self.send_header("X-Should-Retry", "false")
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(body)
        self._responded = True
        self.close_connection = True

    # -- dispatch ----------------------------------------------------------------

    def _serve(self, rec: _Record) -> None:
        gw = self.gateway
        rules = gw.rules
        if rec.method == "CONNECT":
            host, port = _authority(self.path)
            rec.host, rec.port = host, port
            decision = rules.decide("CONNECT", host, port, "")
            _check(rec, decision.allowed, decision.status, decision.rule, decision.reason)
            self._admit(rec)
            self._tunnel(rec, host, port)
            return
        target = self.path
        if target.startswith("/"):
            # Origin-form: the client spoke to the gateway directly (a credential route).
            host, port, path, query = "127.0.0.1", rules.port, *_split_path(target)
        else:
            parts = urlsplit(target)
            if parts.scheme != "http" or not parts.hostname:
                raise _Refused(
                    400,
                    "http",
                    f"unsupported request target {target[:80]!r}; use CONNECT for https",
                )
            host = normalize_host(parts.hostname)
            try:
                port = parts.port or 80
            except ValueError as exc:
                raise _Refused(400, "http", "invalid port in request target") from exc
            path, query = parts.path or "/", parts.query
        rec.host, rec.port, rec.path = host, port, path
        decision = rules.decide(rec.method, host, port, path)
        rec.rule = decision.rule
        _check(rec, decision.allowed, decision.status, decision.rule, decision.reason)
        route = decision.route
        extra: tuple[str, str] | None = None
        tls = False
        if route is not None:
            rec.route = route.name
            try:
                extra = (route.header, route.header_value())
            except GatewayError as exc:
                raise _Refused(502, route.rule, exc.message, decision="failed") from exc
            host, port, path, tls = route.host, route.port, decision.path, route.scheme == "https"
            rec.host, rec.port, rec.path = host, port, path
        self._admit(rec)
        upstream_target = path + (f"?{query}" if query else "")
        self._forward(rec, host, port, tls, upstream_target, extra)

    def _admit(self, rec: _Record) -> None:
        try:
            refusal: Refusal | None = self.gateway.budget.admit()
        except GatewayError as exc:
            raise _Refused(503, "gateway.budget", exc.message, decision="failed") from exc
        if refusal is not None:
            raise _Refused(refusal.status, refusal.rule, refusal.reason)
        rec.decision = "allowed"

    # -- plain HTTP and routes ------------------------------------------------------

    def _forward(
        self,
        rec: _Record,
        host: str,
        port: int,
        tls: bool,
        target: str,
        extra: tuple[str, str] | None,
    ) -> None:
        gw = self.gateway
        try:
            sock = open_connection(host, port, timeout=gw.upstream_timeout, tls=tls)
        except UpstreamError as exc:
            if exc.refused:
                raise _Refused(403, rec.rule, str(exc)) from exc
            raise _Refused(502, rec.rule, str(exc), decision="failed") from exc
        default_port = 443 if tls else 80
        conn = http.client.HTTPConnection(host, port, timeout=gw.upstream_timeout)
        conn.sock = sock
        with gw.tracked(sock), contextlib.closing(conn):
            try:
                conn.putrequest(rec.method, target, skip_host=True, skip_accept_encoding=True)
                conn.putheader("Host", host if port == default_port else f"{host}:{port}")
                for name, value in self._forward_headers(drop=extra[0] if extra else None):
                    conn.putheader(name, value)
                if extra is not None:
                    conn.putheader(*extra)
                chunked = "chunked" in self.headers.get("Transfer-Encoding", "").lower()
                length = self._content_length()
                if chunked:
                    conn.putheader("Transfer-Encoding", "chunked")
                elif length is not None:
                    conn.putheader("Content-Length", str(length))
                conn.endheaders()
                if chunked:
                    for piece in self._read_chunked():
                        conn.send(b"%x\r\n%s\r\n" % (len(piece), piece))
                    conn.send(b"0\r\n\r\n")
                elif length:
                    for piece in self._read_exact(length):
                        conn.send(piece)
                response = conn.getresponse()
            except (OSError, http.client.HTTPException) as exc:
                raise _Refused(
                    502, rec.rule, f"upstream {host}:{port} failed: {_describe(exc)}", "failed"
                ) from exc
            self._relay_response(rec, response)

    def _forward_headers(self, drop: str | None) -> Iterator[tuple[str, str]]:
        listed = {
            token.strip().lower()
            for value in self.headers.get_all("Connection", [])
            for token in value.split(",")
        }
        skip = HOP_BY_HOP | listed | {"host", "content-length"}
        if drop is not None:
            skip = skip | {drop.lower()}  # the box may not supply or override the route header
        for name, value in self.headers.items():
            if name.lower() not in skip:
                yield name, value

    def _content_length(self) -> int | None:
        raw = self.headers.get("Content-Length")
        if raw is None:
            return None
        try:
            length = int(raw)
        except ValueError as exc:
            raise _Refused(400, "http", "invalid Content-Length") from exc
        if length < 0:
            raise _Refused(400, "http", "invalid Content-Length")
        return length

    def _read_exact(self, length: int) -> Iterator[bytes]:
        left = length
        while left > 0:
            piece = self.rfile.read(min(_CHUNK, left))
            if not piece:
                raise ConnectionError("client closed mid-body")
            left -= len(piece)
            yield piece

    def _read_chunked(self) -> Iterator[bytes]:
        while True:
            line = self.rfile.readline(_MAX_CHUNK_LINE)
            try:
                size = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError as exc:
                raise _Refused(400, "http", "malformed chunked request body") from exc
            if size == 0:
                break
            yield from self._read_exact(size)
            self.rfile.readline(_MAX_CHUNK_LINE)
        for _ in range(100):  # trailers end with a blank line; their content is dropped
            if self.rfile.readline(_MAX_CHUNK_LINE) in (b"\r\n", b"\n", b""):
                break

    def _relay_response(self, rec: _Record, response: http.client.HTTPResponse) -> None:
        budget = self.gateway.budget
        left = budget.bytes_left()
        if left is not None and response.length is not None and response.length > left:
            refusal = budget.bytes_refusal()
            raise _Refused(refusal.status, refusal.rule, refusal.reason)
        rec.status = response.status
        self.send_response_only(response.status, response.reason)
        listed = {
            token.strip().lower()
            for value in response.headers.get_all("Connection", [])
            for token in value.split(",")
        }
        for name, value in response.headers.items():
            if name.lower() not in HOP_BY_HOP | listed:
                self.send_header(name, value)
        bodiless = (
            rec.method == "HEAD" or response.status in (204, 304) or 100 <= response.status < 200
        )
        known = response.length is not None or bodiless
        if not known or self.close_connection:
            # Unknown length: the end of the body is the end of the connection.
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self._responded = True
        if bodiless:
            return
        while True:
            piece = response.read1(_CHUNK)
            if not piece:
                break
            self.wfile.write(piece)
            rec.bytes += len(piece)
            if not budget.add_bytes(len(piece)):
                refusal = budget.bytes_refusal()
                raise _Refused(refusal.status, refusal.rule, refusal.reason, "truncated")

    # -- CONNECT tunnels -----------------------------------------------------------

    def _tunnel(self, rec: _Record, host: str, port: int) -> None:
        gw = self.gateway
        try:
            upstream = open_connection(host, port, timeout=gw.upstream_timeout)
        except UpstreamError as exc:
            if exc.refused:
                raise _Refused(403, rec.rule, str(exc)) from exc
            raise _Refused(502, rec.rule, str(exc), decision="failed") from exc
        self.close_connection = True
        with gw.tracked(upstream), contextlib.closing(upstream):
            self.send_response_only(200, "Connection Established")
            self.end_headers()
            self._responded = True
            rec.status = 200
            pending = self._buffered_client_bytes()
            if pending:
                upstream.sendall(pending)
            self._relay(rec, upstream)

    def _buffered_client_bytes(self) -> bytes:
        """Bytes the client sent after the CONNECT header that the parser already buffered."""
        client = self.connection
        client.setblocking(False)  # peek must not wait for bytes that are not there
        try:
            buffered = self.rfile.peek(_CHUNK)  # type: ignore[attr-defined]
            return self.rfile.read(len(buffered)) if buffered else b""
        except (BlockingIOError, TypeError):
            return b""
        finally:
            client.settimeout(self.gateway.client_timeout)

    def _relay(self, rec: _Record, upstream: socket.socket) -> None:
        gw = self.gateway
        client = self.connection
        peers = {client: upstream, upstream: client}
        open_reads = {client, upstream}
        with selectors.DefaultSelector() as selector:
            for sock in open_reads:
                selector.register(sock, selectors.EVENT_READ)
            while open_reads and not gw._stop.is_set():
                ready = selector.select(timeout=gw.tunnel_idle_timeout)
                if not ready:
                    rec.reason = "tunnel idle timeout"
                    return
                for key, _mask in ready:
                    source = cast(socket.socket, key.fileobj)
                    try:
                        data = source.recv(_CHUNK)
                    except BlockingIOError:
                        continue
                    if not data:
                        selector.unregister(source)
                        open_reads.discard(source)
                        with contextlib.suppress(OSError):
                            peers[source].shutdown(socket.SHUT_WR)
                        continue
                    peers[source].sendall(data)
                    if source is upstream:
                        rec.bytes += len(data)
                        if not gw.budget.add_bytes(len(data)):
                            refusal = gw.budget.bytes_refusal()
                            raise _Refused(
                                refusal.status, refusal.rule, refusal.reason, "truncated"
                            )


def _check(rec: _Record, allowed: bool, status: int, rule: str, reason: str) -> None:
    rec.rule = rule
    if not allowed:
        raise _Refused(status, rule, reason)


def _authority(target: str) -> tuple[str, int]:
    parts = urlsplit(f"//{target}")
    try:
        port = parts.port
    except ValueError as exc:
        raise _Refused(400, "http", "CONNECT needs host:port") from exc
    if not parts.hostname or port is None:
        raise _Refused(400, "http", "CONNECT needs host:port")
    return normalize_host(parts.hostname), port


def _split_path(target: str) -> tuple[str, str]:
    path, _, query = target.partition("?")
    return path, query


def _describe(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
