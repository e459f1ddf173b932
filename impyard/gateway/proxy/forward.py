"""Plain HTTP, credential routes and inspected HTTPS: send one judged request upstream,
relay its answer.

Each request gets its own upstream connection. Its body is held to the allow
rule's per-request cap and the run's upload budget as it is sent (``upload``).
The response is relayed while the run's byte budget is charged, and cut at
the budget's last byte; every relayed response leaves a fetch receipt, and its body goes
to the source archive when policy turns that on (``fetch``). Bodies stream a
piece at a time in both directions; none is held whole in memory.
"""

from __future__ import annotations

import contextlib
import io
import select
import socket
import ssl
from dataclasses import dataclass

from impyard.gateway.guard.outcome import Record, Refused
from impyard.gateway.guard.rules import request_cap
from impyard.gateway.guard.upload import RequestCap, UploadMeter
from impyard.gateway.guard.upstream import UpstreamError, open_connection
from impyard.gateway.provenance.fetch import Fetch
from impyard.gateway.provenance.receipts import RECEIPT_HEADER, receipt_url
from impyard.gateway.proxy.client import Client
from impyard.gateway.proxy.framing import CHUNK, Body, Malformed, ResponseHead, read_response_head
from impyard.gateway.proxy.headers import end_to_end, request_head

# Only the gateway names a receipt: an upstream's header of that name is dropped. Its
# Content-Length is written from the framing read, never copied.
_OWN_HEADERS = frozenset({RECEIPT_HEADER.lower(), "content-length"})


@dataclass(frozen=True)
class Destination:
    """Where a judged request goes: ``host:port`` (over TLS or not), as ``target``, with
    ``extra`` (a route's credential header) replacing any header of that name the client
    sent."""

    host: str
    port: int
    tls: bool
    target: str
    extra: tuple[str, str] | None = None
    private_ok: bool = False  # the grant reaches a loopback or private address


def forward(client: Client, rec: Record, to: Destination) -> None:
    """Send the client's request to its destination and relay the answer."""
    host, port, tls = to.host, to.port, to.tls
    gw = client.gateway
    framing = client.framing
    assert framing is not None  # the handler read the head
    meter = UploadMeter(gw.budget, rec, _cap(client, rec, host, port))
    if framing.kind == "length":
        meter.check_declared(framing.length)  # before a byte of it goes upstream
    body = Body(client.rfile, framing)
    # The body's first piece is read before the upstream is reached: a chunked body
    # malformed from its first line is refused with the upstream having seen nothing.
    first = body.read1()
    # A route's upstream may be https while the box spoke plain http to the gateway.
    scheme = "https" if tls else rec.scheme
    fetch = Fetch(
        gw.receipts,
        run=gw.run_id,
        method=rec.method,
        url=receipt_url(scheme, host, port, to.target, gw.policy.secret_query_params),
        route=rec.route,
        archive=gw.archive,
    )
    head = _request_head(client, rec, to)
    try:
        sock = open_connection(
            host,
            port,
            timeout=gw.upstream_timeout,
            tls=tls,
            context=gw.upstream_tls,
            allow_private=to.private_ok,
            route=rec.route,
        )
    except UpstreamError as exc:
        raise Refused.by_upstream(exc, rec.rule) from exc
    chunked = framing.kind == "chunked"
    # Buffered a relay piece deep: a chunk-size line read fills it, and the data after it
    # is then relayed from the buffer in one piece.
    stream = io.BufferedReader(socket.SocketIO(sock, "rb"), CHUNK)
    with gw.tracked(sock), contextlib.closing(sock), stream:
        try:
            sock.sendall(head)
            piece = first
            while piece:
                # Past a limit the rest is never sent: the upstream gets a cut body.
                granted = meter.charge(len(piece))
                if granted:
                    sent = piece[:granted] if granted < len(piece) else piece
                    sock.sendall(b"%x\r\n%s\r\n" % (granted, sent) if chunked else sent)
                if granted < len(piece):
                    raise meter.refusal()
                piece = body.read1()
            if chunked:
                sock.sendall(b"0\r\n\r\n")
            response = read_response_head(stream, rec.method)
        except Malformed as exc:
            if not body.done:
                raise  # the box's body broke the grammar: 400 to the box
            raise _upstream_failed(rec, host, port, f"malformed answer: {exc.reason}") from exc
        except OSError as exc:
            raise _upstream_failed(rec, host, port, _describe(exc)) from exc
        _relay_response(client, rec, response, Body(stream, response.framing), fetch, sock)


def _request_head(client: Client, rec: Record, to: Destination) -> bytes:
    """The head sent upstream: the box's end-to-end headers (never its Host or framing, and
    never the route's header name), the route's header, and framing the gateway wrote."""
    framing = client.framing
    assert framing is not None
    extra = to.extra
    skip = {"host", "content-length"} | ({extra[0].lower()} if extra else set())
    default_port = 443 if to.tls else 80
    fields = [("Host", to.host if to.port == default_port else f"{to.host}:{to.port}")]
    fields += end_to_end(client.headers, frozenset(skip))
    if extra is not None:
        fields.append(extra)
    if framing.kind == "chunked":
        fields.append(("Transfer-Encoding", "chunked"))
    elif framing.kind == "length":
        fields.append(("Content-Length", str(framing.length)))
    try:
        return request_head(rec.method, to.target, fields)
    except Malformed as exc:
        reason = f"cannot send to {to.host}:{to.port}: {exc.reason}"
        raise Refused(502, rec.rule, reason, "failed") from exc


def _upstream_failed(rec: Record, host: str, port: int, what: str) -> Refused:
    return Refused(502, rec.rule, f"upstream {host}:{port} failed: {what}", "failed")


def _cap(client: Client, rec: Record, host: str, port: int) -> RequestCap | None:
    """The per-request body cap of the allow rule granting this request (routes have none)."""
    if rec.route is not None:
        return None
    found = request_cap(client.gateway.policy, host, port, rec.method)
    return None if found is None else RequestCap(*found)


def _relay_response(
    client: Client,
    rec: Record,
    response: ResponseHead,
    body: Body,
    fetch: Fetch,
    upstream: socket.socket,
) -> None:
    rec.status = response.status
    client.send_response_only(response.status, response.reason)
    for name, value in end_to_end(response.headers, _OWN_HEADERS):
        client.send_header(name, value)
    client.send_header(RECEIPT_HEADER, fetch.id)
    kind = response.framing.kind
    bodiless = kind == "none"
    if response.length is not None and kind in ("none", "length"):
        client.send_header("Content-Length", str(response.length))
    # Unknown length: chunked to an HTTP/1.1 client, so a body the gateway cuts (a spent
    # budget, a failed upstream) lacks its last chunk and the box can tell it is short.
    chunked = kind in ("chunked", "close") and client.request_version == "HTTP/1.1"
    if chunked:
        client.send_header("Transfer-Encoding", "chunked")
    elif kind in ("chunked", "close") or client.close_connection:
        # Older clients: the end of the body is the end of the connection.
        client.send_header("Connection", "close")
        client.close_connection = True
    client.end_headers()
    client.responded = True
    content_type = response.headers.get("Content-Type")
    length = response.length if kind == "length" else None
    fetch.begin(response.status, content_type, length, not bodiless)
    complete = False
    try:
        if not bodiless:
            _relay_body(client, rec, body, fetch, chunked, upstream)
        complete = True
    finally:
        # Cut or not, the box got these bytes: the receipt says which and how many.
        rec.receipt = fetch.finish(complete)


def _relay_body(
    client: Client,
    rec: Record,
    body: Body,
    fetch: Fetch,
    chunked: bool,
    upstream: socket.socket,
) -> None:
    """The body as the upstream sent it: transfer coding undone, content coding kept (gzip
    stays gzip), so what is relayed, hashed and archived are the entity's own bytes. Each
    piece is charged before it is relayed, and only what the budget grants goes out: the
    box gets at most the run's budget, to the byte, and the receipt says exactly that."""
    budget = client.gateway.budget
    while True:
        try:
            piece = _read_available(body, upstream)
        except (OSError, Malformed) as exc:
            what = exc.reason if isinstance(exc, Malformed) else _describe(exc)
            raise Refused(
                502, rec.rule, f"upstream {rec.host} failed mid-body: {what}", "failed"
            ) from exc
        if not piece:
            break
        granted = budget.take_bytes(len(piece))
        if granted:
            relayed = piece if granted == len(piece) else piece[:granted]
            client.wfile.write(b"%x\r\n%s\r\n" % (granted, relayed) if chunked else relayed)
            fetch.add(relayed)
            rec.bytes += granted
        if granted < len(piece):
            raise Refused.by_budget(budget.bytes_refusal(), "truncated")
    if chunked:
        client.wfile.write(b"0\r\n\r\n")


def _read_available(body: Body, upstream: socket.socket) -> bytes:
    """The next piece of the body: what one read gives (a TLS read gives one 16 KiB record),
    plus whatever else has already arrived, up to ``CHUNK``. Never waits for more than
    the first read does, so a stream (server-sent events) is relayed as it comes, while a
    bulk download is relayed, hashed and encrypted in fewer, larger pieces."""
    piece = body.read1(CHUNK)
    if not piece or len(piece) >= CHUNK:
        return piece
    pieces = [piece]
    size = len(piece)
    while size < CHUNK and not body.done and _has_input(upstream):
        try:
            more = body.read1(CHUNK - size)
        except (OSError, Malformed):
            break  # what came before the failure is relayed; the next read raises it
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
