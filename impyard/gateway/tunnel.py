"""CONNECT tunnels: bytes both ways between the box and an allowed host:port.

TLS is not terminated, so a tunnel is judged by host and port alone; bytes
from the upstream are charged to the run's response byte budget, bytes towards
it to the run's upload budget, and the tunnel is cut once either is spent,
when the gateway closes, or after an idle timeout.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
from typing import TYPE_CHECKING, cast

from impyard.gateway.framing import CHUNK
from impyard.gateway.outcome import Record, Refused
from impyard.gateway.upstream import UpstreamError, open_connection

# Type only: the handler calls tunnel(), so a runtime import would be circular.
if TYPE_CHECKING:
    from impyard.gateway.handler import GatewayHandler


def tunnel(client: GatewayHandler, rec: Record, host: str, port: int) -> None:
    gw = client.gateway
    try:
        upstream = open_connection(host, port, timeout=gw.upstream_timeout)
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
            if not gw.budget.take_request_bytes(len(pending)):
                raise Refused.by_budget(gw.budget.upload_refusal(), "truncated")
            rec.request_bytes += len(pending)
            upstream.sendall(pending)
        _relay(client, rec, upstream)


def buffered_client_bytes(client: GatewayHandler) -> bytes:
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


def _relay(client: GatewayHandler, rec: Record, upstream: socket.socket) -> None:
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
                if source is conn and not gw.budget.take_request_bytes(len(data)):
                    # Not sent: the upstream sees at most the run's upload budget.
                    raise Refused.by_budget(gw.budget.upload_refusal(), "truncated")
                peers[source].sendall(data)
                if source is conn:
                    rec.request_bytes += len(data)
                else:
                    rec.bytes += len(data)
                    if not gw.budget.add_bytes(len(data)):
                        raise Refused.by_budget(gw.budget.bytes_refusal(), "truncated")
