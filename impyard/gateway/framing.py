"""HTTP/1.1 message framing the gateway does itself: which headers cross it, and where a
request body ends.

The gateway never passes a client's framing on. It reads the body by the
request's own Content-Length or chunked encoding and sends upstream a length
or chunking it wrote, on a fresh connection per request, so bytes past the end
of a body can only become the next request the gateway itself judges.
"""

from __future__ import annotations

from collections.abc import Iterator
from email.message import Message
from io import BufferedIOBase

from impyard.gateway.outcome import Refused

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
CHUNK = 65536
_MAX_CHUNK_LINE = 1024
_MAX_TRAILERS = 100


def end_to_end(headers: Message, skip: frozenset[str] = frozenset()) -> Iterator[tuple[str, str]]:
    """The headers to pass on: none that are hop-by-hop, named in Connection, or in ``skip``
    (lowercase names)."""
    listed = {
        token.strip().lower()
        for value in headers.get_all("Connection", [])
        for token in value.split(",")
    }
    dropped = HOP_BY_HOP | listed | skip
    for name, value in headers.items():
        if name.lower() not in dropped:
            yield name, value


def is_chunked(headers: Message) -> bool:
    return "chunked" in headers.get("Transfer-Encoding", "").lower()


def content_length(headers: Message) -> int | None:
    raw = headers.get("Content-Length")
    if raw is None:
        return None
    try:
        length = int(raw)
    except ValueError as exc:
        raise Refused(400, "http", "invalid Content-Length") from exc
    if length < 0:
        raise Refused(400, "http", "invalid Content-Length")
    return length


def read_exact(rfile: BufferedIOBase, length: int) -> Iterator[bytes]:
    left = length
    while left > 0:
        piece = rfile.read(min(CHUNK, left))
        if not piece:
            raise ConnectionError("client closed mid-body")
        left -= len(piece)
        yield piece


def read_chunked(rfile: BufferedIOBase) -> Iterator[bytes]:
    """The chunks' data; extensions and trailers are read and dropped."""
    while True:
        line = rfile.readline(_MAX_CHUNK_LINE)
        try:
            size = int(line.split(b";", 1)[0].strip(), 16)
        except ValueError as exc:
            raise Refused(400, "http", "malformed chunked request body") from exc
        if size == 0:
            break
        yield from read_exact(rfile, size)
        rfile.readline(_MAX_CHUNK_LINE)
    for _ in range(_MAX_TRAILERS):  # trailers end with a blank line
        if rfile.readline(_MAX_CHUNK_LINE) in (b"\r\n", b"\n", b""):
            break
