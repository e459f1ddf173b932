"""Inspected HTTPS: an allowed ``CONNECT`` is terminated with a leaf certificate for the
requested host, minted by the data root's CA (``ca``), and every HTTP/1.1 request inside
the tunnel is judged and forwarded like plain HTTP: the same method, path and budget
rules, a fresh upstream TLS connection verified by the gateway itself, a receipt per
response.

The tunnel's host and port are fixed by the ``CONNECT`` the rules allowed: an inner
request may not name another host (in its target or its ``Host`` header), since the
upstream would then be asked for something the rules never judged. ALPN offers only
``http/1.1``. A box that does not speak TLS, or does not trust the CA, ends its own
tunnel at the handshake; anything that is not HTTP inside is answered 400.
"""

from __future__ import annotations

import contextlib
import ssl
import threading
from pathlib import Path
from typing import Protocol

from impyard.gateway.guard.outcome import Record, Refused
from impyard.gateway.proxy.client import Client
from impyard.gateway.proxy.tunnel import buffered_client_bytes
from impyard.gateway.wiring.ca import CaError, LeafMinter

RULE = "gateway.inspect_tls"


class InspectingClient(Client, Protocol):
    """A client that can serve the requests inside a tunnel once TLS is terminated."""

    def serve_inspected(self, tls: ssl.SSLSocket, host: str, port: int) -> None: ...


_minters: dict[Path, LeafMinter] = {}
_minters_lock = threading.Lock()


def minter(ca_dir: Path) -> LeafMinter:
    """One minter (and its cache of server contexts) per data root, per process."""
    with _minters_lock:
        found = _minters.get(ca_dir)
        if found is None:
            found = _minters[ca_dir] = LeafMinter(ca_dir)
        return found


def inspect_tunnel(client: InspectingClient, rec: Record, host: str, port: int) -> None:
    """Answer the allowed CONNECT, terminate TLS as ``host``, serve the requests inside."""
    gw = client.gateway
    try:
        context = minter(gw.home.gateway_ca_dir).context_for(host)
    except CaError as exc:
        raise Refused(502, RULE, str(exc), decision="failed") from exc
    if buffered_client_bytes(client):
        # Its TLS hello came before our answer, inside the HTTP parser's buffer: a
        # handshake on the socket would miss it.
        raise Refused(400, "http", "data sent before the tunnel was established")
    client.close_connection = True
    client.send_response_only(200, "Connection Established")
    client.end_headers()
    client.responded = True
    rec.status, rec.decision, rec.reason = 200, "allowed", "inspected"
    try:
        tls = context.wrap_socket(
            client.connection, server_side=True, do_handshake_on_connect=False
        )
    except (OSError, ssl.SSLError) as exc:
        rec.decision, rec.reason = "failed", f"cannot start TLS: {exc}"
        return
    with gw.tracked(tls), contextlib.closing(tls):
        try:
            tls.settimeout(gw.client_timeout)
            tls.do_handshake()
        except (OSError, ssl.SSLError) as exc:
            # The box refused our certificate or spoke no TLS: nothing more can be said.
            rec.decision = "refused"
            rec.rule, rec.reason = RULE, f"TLS handshake with the box failed: {_brief(exc)}"
            return
        client.serve_inspected(tls, host, port)


def _brief(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text[:200]
