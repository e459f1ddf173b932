"""Which headers cross the gateway, and the request heads it writes upstream.

Headers about one connection (hop-by-hop, or named in ``Connection``) never
cross in either direction; the gateway writes a forwarded message's ``Host``
and framing itself, and checks every part of a head it sends against the same
grammar it reads by (``framing``): a route's secret or path comes from the host,
and must not break the framing either.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from email.message import Message

from impyard.gateway.proxy.framing import FIELD_VALUE_RE, TOKEN_RE, Malformed

# Headers about one connection, not the message: never forwarded in either direction.
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
_TARGET = re.compile(r"[\x21-\x7e]+")


def request_head(method: str, target: str, fields: Iterable[tuple[str, str]]) -> bytes:
    """A request head to send upstream, every part checked against the grammar heads are
    read by."""
    if _TARGET.fullmatch(target) is None:
        raise Malformed("a request target with spaces or control characters")
    lines = [f"{method} {target} HTTP/1.1"]
    for name, value in fields:
        try:
            encoded = value.encode("latin-1")
        except UnicodeEncodeError as exc:
            raise Malformed(f"header field {name} is not Latin-1") from exc
        if TOKEN_RE.fullmatch(name.encode()) is None or not FIELD_VALUE_RE.fullmatch(encoded):
            raise Malformed(f"header field {name[:40]!r} cannot be sent as it is")
        lines.append(f"{name}: {value}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def connection_tokens(headers: Message) -> set[str]:
    return {
        token.strip().lower()
        for value in headers.get_all("Connection", [])
        for token in value.split(",")
    }


def end_to_end(headers: Message, skip: frozenset[str] = frozenset()) -> Iterator[tuple[str, str]]:
    """The headers to pass on: none that are hop-by-hop, named in Connection, or in ``skip``
    (lowercase names)."""
    dropped = HOP_BY_HOP | connection_tokens(headers) | skip
    for name, value in headers.items():
        if name.lower() not in dropped:
            yield name, value
