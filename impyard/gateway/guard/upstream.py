"""Connections from the host's namespace to an allowed upstream.

Rules name hosts; DNS decides addresses. A name that resolves to a loopback,
private or link-local address would let an allowed public name reach the
host's own services, so every address must be global, however the host spells
it. An owner who means a local service names its IP in an allow rule, or sets
``allow_private`` on the route whose upstream it is.
"""

from __future__ import annotations

import socket
import ssl

from impyard.gateway.guard.address import AddressError, is_public, lookup

UPSTREAM_TLS_RULE = "gateway.upstream_tls"


class UpstreamError(Exception):
    """Upstream unreachable or refused by the address guard; ``refused`` means 403, else 502."""

    def __init__(self, message: str, *, refused: bool = False, rule: str | None = None) -> None:
        super().__init__(message)
        self.refused = refused
        #: The rule a refusal names, when it is not the request's own allow rule.
        self.rule = rule


def resolve(
    host: str, port: int, *, allow_private: bool = False, route: str | None = None
) -> list[tuple[int, str]]:
    """The addresses to try for ``host``, however it is spelled (``address``): only public
    ones, unless the request's grant reaches private ones (``allow_private``: a route the
    owner marked so, or an allow rule naming that very IP). ``route`` names the route whose
    upstream this is, for the fix a refusal names."""
    try:
        resolved = lookup(host, port)
    except AddressError as exc:
        raise UpstreamError(str(exc)) from exc
    usable = [
        (family, to) for family, to, found in resolved.found if allow_private or is_public(found)
    ]
    if not usable:
        fix = (
            f"set allow_private = true on route {route!r}"
            if route is not None
            else "name the IP in an allow rule"
        )
        raise UpstreamError(f"{resolved.describe()}; {fix} to allow a local service", refused=True)
    return usable


def upstream_context(extra_ca_file: str | None = None) -> ssl.SSLContext:
    """How the gateway verifies upstream TLS: the host's system roots, plus the owner's
    extra CA file (internal services) when policy names one. HTTP/1.1 only."""
    context = ssl.create_default_context()
    if extra_ca_file is not None:
        try:
            context.load_verify_locations(cafile=extra_ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise UpstreamError(f"cannot load box.extra_ca_file {extra_ca_file}: {exc}") from exc
    context.set_alpn_protocols(["http/1.1"])
    return context


def open_connection(
    host: str,
    port: int,
    *,
    timeout: float,
    tls: bool = False,
    context: ssl.SSLContext | None = None,
    allow_private: bool = False,
    route: str | None = None,
) -> socket.socket:
    """A connected socket to ``host:port`` (TLS-wrapped with verification when ``tls``,
    against ``context`` or the system roots)."""
    last: OSError | None = None
    for family, address in resolve(host, port, allow_private=allow_private, route=route):
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            sock.connect((address, port))
            # Requests go out as a head and a body: without this the body waits for an ACK.
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError as exc:
            sock.close()
            last = exc
            continue
        if not tls:
            return sock
        try:
            verifier = context if context is not None else ssl.create_default_context()
            return verifier.wrap_socket(sock, server_hostname=host)
        except ssl.SSLCertVerificationError as exc:
            sock.close()
            raise UpstreamError(
                f"the certificate of {host}:{port} failed verification: {exc.verify_message} "
                "(trusted: the host's system roots and box.extra_ca_file)",
                refused=True,
                rule=UPSTREAM_TLS_RULE,
            ) from exc
        except (OSError, ssl.SSLError) as exc:
            sock.close()
            raise UpstreamError(f"TLS to {host}:{port} failed: {exc}") from exc
    reason = last.strerror if last is not None and last.strerror else str(last)
    raise UpstreamError(f"cannot connect to {host}:{port}: {reason}")
