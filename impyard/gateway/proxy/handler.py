"""One client connection from the box: parse each request, judge it, then forward, tunnel or
refuse it, and leave exactly one journal record per request."""

from __future__ import annotations

import contextlib
import logging
import socket
import ssl
from http.server import BaseHTTPRequestHandler
from socketserver import BaseServer
from typing import Any, Protocol, cast
from urllib.parse import urlsplit

from impyard.gateway.errors import GatewayError
from impyard.gateway.guard.outcome import Record, Refused
from impyard.gateway.guard.rules import Decision, Endpoint, decide, normalize_host, route_header
from impyard.gateway.proxy.client import RunGateway
from impyard.gateway.proxy.control import ControlRate, RunControl, is_control, serve_control
from impyard.gateway.proxy.forward import Destination, forward
from impyard.gateway.proxy.framing import (
    Framing,
    Malformed,
    headers_of,
    read_exact,
    read_fields,
    read_request_line,
    request_framing,
)
from impyard.gateway.proxy.headers import connection_tokens
from impyard.gateway.proxy.inspect import inspect_tunnel
from impyard.gateway.proxy.tunnel import tunnel

log = logging.getLogger(__name__)
# A refused request's body up to this size is read and dropped so the refusal arrives.
_DISCARD_LIMIT = 1024 * 1024


class ServedGateway(RunGateway, Protocol):
    """The run's gateway as its handlers use it: what a request sees, plus where control
    requests go and where each request's journal record is written."""

    @property
    def control(self) -> RunControl | None: ...

    @property
    def control_rate(self) -> ControlRate: ...

    def record(self, rec: Record) -> None: ...


class GatewayHandler(BaseHTTPRequestHandler):
    """The stdlib's handler writes answers; heads are read by ``framing``'s grammar (which
    refuses what RFC 9112 does not frame for certain), and everything a request may reach
    is decided here."""

    protocol_version = "HTTP/1.1"
    server_version = "impyard-gateway"
    sys_version = ""

    def __init__(self, conn: socket.socket, gateway: ServedGateway) -> None:
        self.gateway = gateway
        # Once a status line went out, a refusal can only cut the connection.
        self.responded = False
        #: How the current request's body is framed (None until its head is read).
        self.framing: Framing | None = None
        # The stdlib handler never consults ``server`` for what this class does.
        super().__init__(conn, ("box", 0), cast(BaseServer, None))

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("gateway %s: " + format, self.gateway.run_id, *args)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        # Malformed requests: a one-line plain-text answer instead of the stdlib's HTML page,
        # with a status line even when the request line was too broken to name a version.
        self.request_version = self.protocol_version
        self.send_text(code, f"impyard gateway: {message or 'bad request'}", rule="http")

    def handle_one_request(self) -> None:
        try:
            line = read_request_line(self.rfile)
        except (TimeoutError, ConnectionError):
            self.close_connection = True
            return
        except Malformed as bad:
            self.send_error(bad.status, bad.reason)
            return
        if line is None:
            self.close_connection = True
            return
        self.command, self.path, self.request_version = line.method, line.target, line.version
        self.requestline = f"{line.method} {line.target} {line.version}"
        self.responded = False
        # Whether this request's body was read (or handed to the code that reads it).
        self.body_read = False
        self.framing = None
        rec = Record(method=self.command.upper())
        try:
            self._read_head()
            self._serve(rec)
        except (Refused, Malformed) as exc:
            refusal = exc if isinstance(exc, Refused) else Refused(exc.status, "http", exc.reason)
            rec.rule, rec.reason, rec.decision = refusal.rule, refusal.reason, refusal.decision
            if self.responded:
                self.close_connection = True  # mid-body: cutting the connection is the signal
            else:
                rec.status = refusal.status
                self._discard_small_body()
                self.send_text(refusal.status, f"impyard gateway: {refusal.reason}", refusal.rule)
        except (TimeoutError, ConnectionError) as exc:
            rec.decision, rec.reason = "failed", f"connection ended: {type(exc).__name__}"
            rec.status = rec.status or 502
            self.close_connection = True
        finally:
            self.gateway.record(rec)

    def _read_head(self) -> None:
        """The header section and the body's framing; ``Malformed`` when either breaks the
        grammar, before anything of the request has gone anywhere."""
        fields = read_fields(self.rfile)
        self.headers = headers_of(fields)
        self.framing = request_framing(fields, self.request_version)
        # Persistence as RFC 9112 has it: HTTP/1.1 keeps the connection unless told to
        # close, HTTP/1.0 closes it unless told to keep it.
        tokens = connection_tokens(self.headers)
        http10 = self.request_version == "HTTP/1.0"
        self.close_connection = "close" in tokens or (http10 and "keep-alive" not in tokens)
        expect = (self.headers.get("Expect") or "").strip().lower()
        if expect == "100-continue" and not http10:
            self.send_response_only(100)
            self.end_headers()

    def _discard_small_body(self) -> None:
        """Read (never forward) a small unread request body before refusing: closing a
        connection with unread bytes resets it, and the client would lose the refusal."""
        framing = self.framing
        if self.body_read or framing is None or framing.kind != "length":
            return
        if 0 < framing.length <= _DISCARD_LIMIT:
            with contextlib.suppress(OSError, ConnectionError, Malformed):
                for _ in read_exact(self.rfile, framing.length):
                    pass
        self.body_read = True

    def send_text(self, status: int, line: str, rule: str) -> None:
        """A refusal: one plain-text line naming the rule, then the connection ends."""
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
        self.responded = True
        self.close_connection = True

    def _serve(self, rec: Record) -> None:
        policy = self.gateway.policy
        if rec.method == "CONNECT":
            host, port = _authority(self.path)
            rec.host, rec.port = host, port
            decision = decide(policy, "CONNECT", host, port, "")
            check_decision(rec, decision)
            if policy.inspect_tls:
                inspect_tunnel(self, rec, host, port)  # each request inside is charged
                return
            self._admit(rec)
            tunnel(self, rec, host, port, private_ok=decision.private_ok)
            return
        target = self.path
        if target.startswith("/"):
            # Origin-form: the client spoke to the gateway directly (a credential route).
            host, port = "127.0.0.1", policy.port
            path, _, query = target.partition("?")
        else:
            parts = urlsplit(target)
            if parts.scheme != "http" or not parts.hostname:
                raise Refused(
                    400,
                    "http",
                    f"unsupported request target {target[:80]!r}; use CONNECT for https",
                )
            host = normalize_host(parts.hostname)
            try:
                port = parts.port or 80
            except ValueError as exc:
                raise Refused(400, "http", "invalid port in request target") from exc
            path, query = parts.path or "/", parts.query
        rec.host, rec.port, rec.path = host, port, path
        if is_control(host, port, policy.port, path):
            gateway = self.gateway
            self.body_read = True  # the control API reads and drops it
            serve_control(self, rec, path, query, gateway.control, gateway.control_rate)
            return
        decision = decide(policy, rec.method, host, port, path)
        check_decision(rec, decision)
        extra: tuple[str, str] | None = None
        tls = False
        route = decision.route
        if route is not None:
            rec.route = route.name
            try:
                extra = route_header(route)
            except GatewayError as exc:
                raise Refused(502, decision.rule, exc.message, decision="failed") from exc
            endpoint = Endpoint.of(route)
            host, port, path, tls = endpoint.host, endpoint.port, decision.path, endpoint.tls
            rec.host, rec.port, rec.path = host, port, path
        self._admit(rec)
        self.body_read = True  # forward relays it
        upstream_target = path + (f"?{query}" if query else "")
        forward(
            self,
            rec,
            Destination(host, port, tls, upstream_target, extra, decision.private_ok),
        )

    def serve_inspected(self, tls: ssl.SSLSocket, host: str, port: int) -> None:
        """Serve the requests inside a terminated tunnel to ``host:port``."""
        InspectedHandler(tls, self.gateway, host, port)

    def _admit(self, rec: Record) -> None:
        """Charge the budget for a request that is about to leave; refuse if it is spent."""
        try:
            refusal = self.gateway.budget.admit()
        except GatewayError as exc:
            raise Refused(503, "gateway.budget", exc.message, decision="failed") from exc
        if refusal is not None:
            raise Refused.by_budget(refusal)
        rec.decision = "allowed"


class InspectedHandler(GatewayHandler):
    """The requests inside an inspected tunnel: judged and forwarded like plain HTTP, to the
    tunnel's host over TLS the gateway verifies. The CONNECT the rules allowed fixed the
    host and port; a request naming another (target or ``Host``) is refused."""

    def __init__(self, conn: ssl.SSLSocket, gateway: ServedGateway, host: str, port: int) -> None:
        self.tunnel_host, self.tunnel_port = host, port
        super().__init__(conn, gateway)

    def _serve(self, rec: Record) -> None:
        rec.scheme = "https"
        host, port = self.tunnel_host, self.tunnel_port
        rec.host, rec.port = host, port
        if rec.method == "CONNECT":
            raise Refused(400, "http", "CONNECT inside an inspected tunnel")
        target = self.path
        if target.startswith("/"):
            path, _, query = target.partition("?")
        else:
            parts = urlsplit(target)
            if not self._is_tunnel(parts.scheme, parts.hostname, _port_of(parts.netloc)):
                raise Refused(400, "http", f"request target {target[:80]!r} leaves the tunnel")
            path, query = parts.path or "/", parts.query
        named = urlsplit(f"//{self.headers.get('Host', '')}")
        if named.hostname and not self._is_tunnel("https", named.hostname, _port_of(named.netloc)):
            raise Refused(400, "http", f"the Host header names another host than {host}")
        rec.path = path
        decision = decide(self.gateway.policy, rec.method, host, port, path)
        check_decision(rec, decision)
        self._admit(rec)
        self.body_read = True  # forward relays it
        target = path + (f"?{query}" if query else "")
        forward(self, rec, Destination(host, port, True, target, private_ok=decision.private_ok))

    def _is_tunnel(self, scheme: str, name: str | None, port: int | None) -> bool:
        return (
            scheme == "https"
            and name is not None
            and normalize_host(name) == self.tunnel_host
            and (port or 443) == self.tunnel_port
        )


def _port_of(netloc: str) -> int | None:
    try:
        return urlsplit(f"//{netloc}").port
    except ValueError as exc:
        raise Refused(400, "http", "invalid port in the request") from exc


def check_decision(rec: Record, decision: Decision) -> None:
    rec.rule = decision.rule
    if not decision.allowed:
        raise Refused(decision.status, decision.rule, decision.reason)


def _authority(target: str) -> tuple[str, int]:
    parts = urlsplit(f"//{target}")
    try:
        port = parts.port
    except ValueError as exc:
        raise Refused(400, "http", "CONNECT needs host:port") from exc
    if not parts.hostname or port is None:
        raise Refused(400, "http", "CONNECT needs host:port")
    return normalize_host(parts.hostname), port
