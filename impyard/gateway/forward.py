"""Plain HTTP, credential routes and inspected HTTPS: send one judged request upstream,
relay its answer.

Each request gets its own upstream connection. Its body is held to the allow
rule's per-request cap and the run's upload budget as it is sent (``upload``).
The response is relayed while the run's byte budget is charged, and cut when
it is spent; every relayed response leaves a fetch receipt, and its body goes
to the source archive when policy turns that on (``fetch``). Bodies stream a
piece at a time in both directions; none is held whole in memory.
"""

from __future__ import annotations

import contextlib
import http.client
import select
import socket
import ssl
from typing import TYPE_CHECKING

from impyard.gateway.fetch import Fetch
from impyard.gateway.framing import (
    CHUNK,
    content_length,
    end_to_end,
    is_chunked,
    read_chunked,
    read_exact,
)
from impyard.gateway.outcome import Record, Refused
from impyard.gateway.receipts import RECEIPT_HEADER, receipt_url
from impyard.gateway.rules import request_cap
from impyard.gateway.upload import RequestCap, UploadMeter
from impyard.gateway.upstream import UpstreamError, open_connection

# Type only: the handler calls forward(), so a runtime import would be circular.
if TYPE_CHECKING:
    from impyard.gateway.handler import GatewayHandler

# Only the gateway names a receipt: an upstream's header of that name is dropped.
_OWN_HEADERS = frozenset({RECEIPT_HEADER.lower()})


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
    headers = client.headers
    chunked = is_chunked(headers)
    length = content_length(headers)
    meter = UploadMeter(gw.budget, rec, _cap(client, rec, host, port))
    if length and not chunked:
        meter.check_declared(length)  # before a byte of it goes upstream
    # A route's upstream may be https while the box spoke plain http to the gateway.
    scheme = "https" if tls else rec.scheme
    fetch = Fetch(
        gw.receipts,
        run=gw.run_id,
        method=rec.method,
        url=receipt_url(scheme, host, port, target, gw.policy.secret_query_params),
        route=rec.route,
        archive=gw.archive,
    )
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
    with gw.tracked(sock), contextlib.closing(conn):
        try:
            conn.putrequest(rec.method, target, skip_host=True, skip_accept_encoding=True)
            conn.putheader("Host", host if port == default_port else f"{host}:{port}")
            for name, value in end_to_end(headers, skip):
                conn.putheader(name, value)
            if extra is not None:
                conn.putheader(*extra)
            if chunked:
                conn.putheader("Transfer-Encoding", "chunked")
            elif length is not None:
                conn.putheader("Content-Length", str(length))
            conn.endheaders()
            body = read_chunked(client.rfile) if chunked else read_exact(client.rfile, length or 0)
            for piece in body:
                # A refusal here leaves the upstream with a cut body, never the excess.
                meter.charge(len(piece))
                conn.send(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
            if chunked:
                conn.send(b"0\r\n\r\n")
            response = conn.getresponse()
        except (OSError, http.client.HTTPException) as exc:
            raise Refused(
                502, rec.rule, f"upstream {host}:{port} failed: {_describe(exc)}", "failed"
            ) from exc
        _relay_response(client, rec, response, fetch, sock)


def _cap(client: GatewayHandler, rec: Record, host: str, port: int) -> RequestCap | None:
    """The per-request body cap of the allow rule granting this request (routes have none)."""
    if rec.route is not None:
        return None
    found = request_cap(client.gateway.policy, host, port, rec.method)
    return None if found is None else RequestCap(*found)


def _relay_response(
    client: GatewayHandler,
    rec: Record,
    response: http.client.HTTPResponse,
    fetch: Fetch,
    upstream: socket.socket,
) -> None:
    budget = client.gateway.budget
    if response.length is not None and response.length > budget.bytes_left():
        # Refused before a byte is relayed, while a legible 429 can still be sent.
        raise Refused.by_budget(budget.bytes_refusal())
    rec.status = response.status
    client.send_response_only(response.status, response.reason)
    for name, value in end_to_end(response.headers, _OWN_HEADERS):
        client.send_header(name, value)
    client.send_header(RECEIPT_HEADER, fetch.id)
    bodiless = rec.method == "HEAD" or response.status in (204, 304) or 100 <= response.status < 200
    known = response.length is not None or bodiless
    # Unknown length: chunked to an HTTP/1.1 client, so a body the gateway cuts (a spent
    # budget, a failed upstream) lacks its last chunk and the box can tell it is short.
    chunked = not known and client.request_version == "HTTP/1.1"
    if chunked:
        client.send_header("Transfer-Encoding", "chunked")
    elif not known or client.close_connection:
        # Older clients: the end of the body is the end of the connection.
        client.send_header("Connection", "close")
        client.close_connection = True
    client.end_headers()
    client.responded = True
    content_type = response.headers.get("Content-Type")
    fetch.begin(response.status, content_type, response.length, not bodiless)
    complete = False
    try:
        if not bodiless:
            _relay_body(client, rec, response, fetch, chunked, upstream)
        complete = True
    finally:
        # Cut or not, the box got these bytes: the receipt says which and how many.
        rec.receipt = fetch.finish(complete)


def _relay_body(
    client: GatewayHandler,
    rec: Record,
    response: http.client.HTTPResponse,
    fetch: Fetch,
    chunked: bool,
    upstream: socket.socket,
) -> None:
    """The body as the upstream sent it: read1 undoes chunking but no content coding, so
    what is relayed, hashed and archived are the entity's own bytes (gzip stays gzip)."""
    budget = client.gateway.budget
    while True:
        try:
            piece = _read_available(response, upstream)
        except (OSError, http.client.HTTPException) as exc:
            raise Refused(
                502, rec.rule, f"upstream {rec.host} failed mid-body: {_describe(exc)}", "failed"
            ) from exc
        if not piece:
            break
        client.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
        fetch.add(piece)
        rec.bytes += len(piece)
        if not budget.add_bytes(len(piece)):
            raise Refused.by_budget(budget.bytes_refusal(), "truncated")
    if response.length:
        # read1 does not raise when the upstream closes before its Content-Length: the box
        # must not wait for bytes that will never come.
        raise Refused(
            502,
            rec.rule,
            f"upstream {rec.host} ended the body {response.length} bytes short",
            "failed",
        )
    if chunked:
        client.wfile.write(b"0\r\n\r\n")


def _read_available(response: http.client.HTTPResponse, upstream: socket.socket) -> bytes:
    """The next piece of the body: what one read gives (a TLS read gives one 16 KiB record),
    plus whatever else has already arrived, up to ``CHUNK``. Never waits for more than
    the first read does, so a stream (server-sent events) is relayed as it comes, while a
    bulk download is relayed, hashed and encrypted in fewer, larger pieces."""
    piece = response.read1(CHUNK)
    if not piece or len(piece) >= CHUNK:
        return piece
    pieces = [piece]
    size = len(piece)
    while size < CHUNK and _has_input(upstream):
        more = response.read1(CHUNK - size)
        if not more:
            break
        pieces.append(more)
        size += len(more)
    return pieces[0] if len(pieces) == 1 else b"".join(pieces)


def _has_input(sock: socket.socket) -> bool:
    if isinstance(sock, ssl.SSLSocket) and sock.pending():
        return True
    readable, _, _ = select.select([sock], [], [], 0)
    return bool(readable)


def _describe(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
