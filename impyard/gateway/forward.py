"""Plain HTTP and credential routes: send one judged request upstream, relay its answer.

Each request gets its own upstream connection; the response is relayed while
the run's byte budget is charged, and cut when it is spent.
"""

from __future__ import annotations

import contextlib
import http.client
from typing import TYPE_CHECKING

from impyard.gateway.framing import (
    CHUNK,
    content_length,
    end_to_end,
    is_chunked,
    read_chunked,
    read_exact,
)
from impyard.gateway.outcome import Record, Refused
from impyard.gateway.upstream import UpstreamError, open_connection

# Type only: the handler calls forward(), so a runtime import would be circular.
if TYPE_CHECKING:
    from impyard.gateway.handler import GatewayHandler


def forward(
    client: GatewayHandler,
    rec: Record,
    host: str,
    port: int,
    tls: bool,
    target: str,
    extra: tuple[str, str] | None,
) -> None:
    """Send the client's request to ``host:port`` as ``target``, with ``extra`` (a route's
    credential header) replacing any header of that name the client sent."""
    gw = client.gateway
    try:
        sock = open_connection(
            host, port, timeout=gw.upstream_timeout, tls=tls, context=gw.upstream_tls
        )
    except UpstreamError as exc:
        raise Refused.by_upstream(exc, rec.rule) from exc
    default_port = 443 if tls else 80
    conn = http.client.HTTPConnection(host, port, timeout=gw.upstream_timeout)
    conn.sock = sock
    # The box may not supply or override the route's header; the body is re-framed below.
    skip = frozenset({"host", "content-length"} | ({extra[0].lower()} if extra else set()))
    headers = client.headers
    with gw.tracked(sock), contextlib.closing(conn):
        try:
            conn.putrequest(rec.method, target, skip_host=True, skip_accept_encoding=True)
            conn.putheader("Host", host if port == default_port else f"{host}:{port}")
            for name, value in end_to_end(headers, skip):
                conn.putheader(name, value)
            if extra is not None:
                conn.putheader(*extra)
            chunked = is_chunked(headers)
            length = content_length(headers)
            if chunked:
                conn.putheader("Transfer-Encoding", "chunked")
            elif length is not None:
                conn.putheader("Content-Length", str(length))
            conn.endheaders()
            if chunked:
                for piece in read_chunked(client.rfile):
                    conn.send(b"%x\r\n%s\r\n" % (len(piece), piece))
                conn.send(b"0\r\n\r\n")
            elif length:
                for piece in read_exact(client.rfile, length):
                    conn.send(piece)
            response = conn.getresponse()
        except (OSError, http.client.HTTPException) as exc:
            raise Refused(
                502, rec.rule, f"upstream {host}:{port} failed: {_describe(exc)}", "failed"
            ) from exc
        _relay_response(client, rec, response)


def _relay_response(
    client: GatewayHandler, rec: Record, response: http.client.HTTPResponse
) -> None:
    budget = client.gateway.budget
    if response.length is not None and response.length > budget.bytes_left():
        # Refused before a byte is relayed, while a legible 429 can still be sent.
        raise Refused.by_budget(budget.bytes_refusal())
    rec.status = response.status
    client.send_response_only(response.status, response.reason)
    for name, value in end_to_end(response.headers):
        client.send_header(name, value)
    bodiless = rec.method == "HEAD" or response.status in (204, 304) or 100 <= response.status < 200
    known = response.length is not None or bodiless
    if not known or client.close_connection:
        # Unknown length: the end of the body is the end of the connection.
        client.send_header("Connection", "close")
        client.close_connection = True
    client.end_headers()
    client.responded = True
    if bodiless:
        return
    while True:
        piece = response.read1(CHUNK)
        if not piece:
            break
        client.wfile.write(piece)
        rec.bytes += len(piece)
        if not budget.add_bytes(len(piece)):
            raise Refused.by_budget(budget.bytes_refusal(), "truncated")


def _describe(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
