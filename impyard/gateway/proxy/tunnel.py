"""CONNECT tunnels: bytes both ways between the box and an allowed host:port.

TLS is not terminated, so a tunnel is judged by host and port alone; bytes
from the upstream are charged to the run's response byte budget, bytes towards
it to the run's upload budget, and the tunnel is cut at the byte where either is
spent (what fits is relayed, nothing past it), when the gateway closes, or after
an idle timeout.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
from typing import cast

from impyard.gateway.guard.outcome import Record, Refused
from impyard.gateway.guard.upstream import UpstreamError, open_connection
from impyard.gateway.proxy.client import Client
from impyard.gateway.proxy.framing import CHUNK


def tunnel(client: Client, rec: Record, host: str, port: int, *, private_ok: bool) -> None:
    """``private_ok``: the allow rule names this very IP, so it may be a private one."""
    gw = client.gateway
    try:
        upstream = open_connection(
            host, port, timeout=gw.upstream_timeout, allow_private=private_ok
        )
    except UpstreamError as exc:
        raise Refused.by_upstream(exc, rec.rule) from exc
    client.close_connection = True
    with gw.tracked(upstream), contextlib.closing(upstream):
        client.send_response_only(200, "Connection Established")
        client.end_headers()
        client.responded = True
        rec.status = 200
        pending = buffered_client_bytes(client)
        if pending:
            # Sent along with the CONNECT: upload bytes like any other.
            _pass_on(client, rec, pending, upstream, upload=True)
        _relay(client, rec, upstream)


def buffered_client_bytes(client: Client) -> bytes:
    """Bytes the client sent after the CONNECT header that the parser already buffered: a
    client may send its TLS hello in the same packet, and the socket will not see it again."""
    conn: socket.socket = client.connection
    conn.setblocking(False)  # peek must not wait for bytes that are not there
    try:
        buffered = client.rfile.peek(CHUNK)  # type: ignore[attr-defined]
        return client.rfile.read(len(buffered)) if buffered else b""
    except (BlockingIOError, TypeError):
        return b""
    finally:
        conn.settimeout(client.gateway.client_timeout)


def _relay(client: Client, rec: Record, upstream: socket.socket) -> None:
    gw = client.gateway
    conn: socket.socket = client.connection
    peers = {conn: upstream, upstream: conn}
    open_reads = {conn, upstream}
    with selectors.DefaultSelector() as selector:
        for sock in open_reads:
            selector.register(sock, selectors.EVENT_READ)
        while open_reads and not gw.stopping:
            ready = selector.select(timeout=gw.tunnel_idle_timeout)
            if not ready:
                rec.reason = "tunnel idle timeout"
                return
            for key, _mask in ready:
                source = cast(socket.socket, key.fileobj)
                try:
                    data = source.recv(CHUNK)
                except BlockingIOError:
                    continue
                if not data:
                    # Half-close: pass the end on and keep reading the other direction.
                    selector.unregister(source)
                    open_reads.discard(source)
                    with contextlib.suppress(OSError):
                        peers[source].shutdown(socket.SHUT_WR)
                    continue
                _pass_on(client, rec, data, peers[source], upload=source is conn)


def _pass_on(client: Client, rec: Record, data: bytes, to: socket.socket, *, upload: bool) -> None:
    """Send what the run's budget grants of ``data``; past it the tunnel ends, so a peer
    receives at most the budget, to the byte."""
    budget = client.gateway.budget
    granted = budget.take_request_bytes(len(data)) if upload else budget.take_bytes(len(data))
    if granted:
        to.sendall(data if granted == len(data) else data[:granted])
    if upload:
        rec.request_bytes += granted
    else:
        rec.bytes += granted
    if granted < len(data):
        spent = budget.upload_refusal() if upload else budget.bytes_refusal()
        raise Refused.by_budget(spent, "truncated")
