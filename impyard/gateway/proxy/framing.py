"""HTTP/1.1 message framing as RFC 9112 writes it, for both directions of the gateway: a
message's head, where its body ends, and which headers cross.

Strict on purpose. The gateway stands between the box's HTTP client and an upstream's
server, and any message the two could read differently is a way past the rules (a
request line-folded onto a judged one reached an upstream as a second request no rule
judged). So every message is read by one grammar, the RFC's, and anything outside it
is refused, never repaired:

- a header line starting with whitespace (obsolete line folding);
- a field name that is not a token, a field value holding a control character
  (CR, LF, NUL or any other, HTAB inside a value aside);
- Content-Length values that are not digits, or that disagree (``0`` and ``91``);
  the same value repeated is read once, as RFC 9110 allows;
- Transfer-Encoding beside Content-Length, in an HTTP/1.0 message, or not ending in
  a single ``chunked`` (400; ``gzip, chunked`` and other codings: 501);
- a chunk size that is not 1 to 16 hex digits, a chunk extension outside the
  ``;name=value`` grammar or over ``MAX_CHUNK_LINE``, chunk data not followed by CRLF.

A request is answered with the status ``Malformed`` carries; a response breaking a
rule is an upstream failure (502). The maintained parser h11 was weighed and not
taken: it unfolds obsolete folding into the value, lets control characters other
than NUL and whitespace through, reads chunk sizes of up to 20 hex digits and any
bytes after a ``;`` as an extension; closing those from outside it takes a second
reader of the same bytes, and two readers of one message are what a smuggle needs.

The gateway never passes a client's framing on: it reads a body by the framing
read here and sends one it wrote (``headers``), on a fresh connection per request,
so bytes past the end of a body can only become the next request the gateway itself
judges.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from email.message import Message
from http.client import HTTPMessage
from io import BufferedIOBase
from typing import Literal

CHUNK = 65536
#: The longest request or status line (a longer request line is answered 414).
MAX_START_LINE = 65536
#: A head's header section (or a chunked body's trailers) at most: bytes and fields.
MAX_FIELD_BYTES = 65536
MAX_FIELDS = 100
#: A chunk-size line with its extensions, CRLF included.
MAX_CHUNK_LINE = 4096
#: Interim (1xx) responses skipped before an upstream's final one.
MAX_INTERIM = 10

_TOKEN = rb"[-!#$%&'*+.^_`|~0-9A-Za-z]+"
_VCHAR = rb"[\x21-\x7e\x80-\xff]"
TOKEN_RE = re.compile(_TOKEN)
_REQUEST_LINE = re.compile(rb"(%s) ([\x21-\x7e]+) HTTP/([0-9])\.([0-9])" % _TOKEN)
# The reason phrase may be missing, as some servers send it.
_STATUS_LINE = re.compile(rb"HTTP/([0-9])\.([0-9]) ([0-9]{3})(?: ([\t\x20-\x7e\x80-\xff]*))?")
_FIELD_VALUE = rb"(?:%s+(?:[ \t]+%s+)*)?" % (_VCHAR, _VCHAR)
FIELD_VALUE_RE = re.compile(_FIELD_VALUE)
_FIELD_LINE = re.compile(rb"(%s):[ \t]*(%s)[ \t]*" % (_TOKEN, _FIELD_VALUE))
_QUOTED = rb'"(?:[\t \x21\x23-\x5b\x5d-\x7e\x80-\xff]|\\[\t \x21-\x7e\x80-\xff])*"'
_CHUNK_EXT = rb"(?:[ \t]*;[ \t]*%s(?:[ \t]*=[ \t]*(?:%s|%s))?)*" % (_TOKEN, _TOKEN, _QUOTED)
# Whitespace before the CRLF is outside the grammar but common from servers, and harmless.
_CHUNK_LINE = re.compile(rb"([0-9A-Fa-f]{1,16})%s[ \t]*\r\n" % _CHUNK_EXT)
_DIGITS = re.compile(r"[0-9]{1,18}")


class Malformed(Exception):
    """A message outside the grammar: ``status`` answers a request that broke it (400, 501
    for an unsupported transfer coding, 414/431 for a head too large, 505)."""

    def __init__(self, reason: str, status: int = 400) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status


@dataclass(frozen=True)
class Framing:
    """Where a body ends: ``none`` (no body, no framing header), ``length`` bytes,
    ``chunked``, or ``close`` (a response that ends with its connection)."""

    kind: Literal["none", "length", "chunked", "close"]
    length: int = 0


NO_BODY = Framing("none")
CHUNKED = Framing("chunked")


@dataclass(frozen=True)
class RequestLine:
    method: str
    target: str
    #: "HTTP/1.0" or "HTTP/1.1" (a later 1.x minor version is read as 1.1).
    version: str


@dataclass(frozen=True)
class ResponseHead:
    status: int
    reason: str
    headers: HTTPMessage
    framing: Framing
    #: The Content-Length the upstream declared (also on a HEAD answer, which has no body).
    length: int | None


def _line(raw: bytes, limit: int) -> bytes:
    """``raw`` without its line ending (CRLF, or LF as RFC 9112 lets a recipient accept)."""
    if len(raw) > limit:
        raise Malformed(f"a line over {limit} bytes", 431)
    if not raw.endswith(b"\n"):
        raise ConnectionError("the peer closed in the middle of a line")
    return raw[:-2] if raw.endswith(b"\r\n") else raw[:-1]


def read_request_line(stream: BufferedIOBase) -> RequestLine | None:
    """The next request line (None: the peer closed between requests). One empty line
    before it is skipped, as RFC 9112 asks of a server."""
    raw = stream.readline(MAX_START_LINE + 1)
    if raw in (b"\r\n", b"\n"):
        raw = stream.readline(MAX_START_LINE + 1)
    if not raw:
        return None
    if len(raw) > MAX_START_LINE:
        raise Malformed("request line too long", 414)
    found = _REQUEST_LINE.fullmatch(_line(raw, MAX_START_LINE))
    if found is None:
        raise Malformed("malformed request line")
    method, target, major, minor = (part.decode("ascii") for part in found.groups())
    if major != "1":
        raise Malformed(f"HTTP/{major}.{minor} is not supported", 505)
    return RequestLine(method, target, "HTTP/1.0" if minor == "0" else "HTTP/1.1")


def read_fields(stream: BufferedIOBase) -> list[tuple[str, str]]:
    """A header (or trailer) section up to its empty line: (name, value) pairs as sent,
    values without surrounding whitespace, decoded as Latin-1 (lossless)."""
    fields: list[tuple[str, str]] = []
    left = MAX_FIELD_BYTES
    while True:
        raw = stream.readline(left + 1)
        if len(raw) > left:
            raise Malformed(f"header section over {MAX_FIELD_BYTES} bytes", 431)
        left -= len(raw)
        line = _line(raw, MAX_FIELD_BYTES)
        if not line:
            return fields
        if line[:1] in (b" ", b"\t"):
            raise Malformed("obsolete line folding (a header line starts with whitespace)")
        if len(fields) == MAX_FIELDS:
            raise Malformed(f"more than {MAX_FIELDS} header fields", 431)
        fields.append(_field(line))


def _field(line: bytes) -> tuple[str, str]:
    found = _FIELD_LINE.fullmatch(line)
    if found is not None:
        return found[1].decode("ascii"), found[2].decode("latin-1")
    # Name only what is known to be a token: a value may hold a secret.
    name = line.partition(b":")[0]
    if TOKEN_RE.fullmatch(name) is None:
        raise Malformed("a header field name that is not a token")
    raise Malformed(f"header field {name.decode('ascii')} has a value with control characters")


def headers_of(fields: Iterable[tuple[str, str]]) -> HTTPMessage:
    """Fields as the Message the rest of the gateway reads (order and case kept)."""
    message = HTTPMessage()
    for name, value in fields:
        message[name] = value
    return message


def _content_length(fields: list[tuple[str, str]]) -> int | None:
    values = {
        item.strip()
        for name, value in fields
        if name.lower() == "content-length"
        for item in value.split(",")
    }
    if not values:
        return None
    if len(values) > 1:
        raise Malformed("conflicting Content-Length values")
    value = values.pop()
    if _DIGITS.fullmatch(value) is None:
        raise Malformed("invalid Content-Length")
    return int(value)


def _codings(fields: list[tuple[str, str]]) -> list[str]:
    codings = [
        item.strip().lower()
        for name, value in fields
        if name.lower() == "transfer-encoding"
        for item in value.split(",")
    ]
    if any(TOKEN_RE.fullmatch(coding.encode()) is None for coding in codings):
        raise Malformed("malformed Transfer-Encoding")
    return codings


def _chunked_only(codings: list[str], length: int | None, http10: bool) -> None:
    if length is not None:
        raise Malformed("both Transfer-Encoding and Content-Length")
    if http10:
        raise Malformed("Transfer-Encoding in an HTTP/1.0 message")
    if codings[-1] != "chunked" or codings.count("chunked") > 1:
        raise Malformed("Transfer-Encoding does not end with a single chunked")
    if len(codings) > 1:
        raise Malformed(f"transfer coding {codings[0]} is not supported", 501)


def request_framing(fields: list[tuple[str, str]], version: str) -> Framing:
    """How a request's body is framed (RFC 9112 section 6.3); Malformed when it cannot be
    told for certain. More than one Host is refused too: which one names the target? So
    is an HTTP/1.1 request with none (RFC 9112 section 3.2: a server must answer 400)."""
    hosts = sum(1 for name, _ in fields if name.lower() == "host")
    if hosts > 1:
        raise Malformed("more than one Host header")
    if hosts == 0 and version != "HTTP/1.0":
        raise Malformed(f"an {version} request without a Host header")
    codings = _codings(fields)
    length = _content_length(fields)
    if codings:
        _chunked_only(codings, length, version == "HTTP/1.0")
        return CHUNKED
    return NO_BODY if length is None else Framing("length", length)


def read_response_head(stream: BufferedIOBase, method: str) -> ResponseHead:
    """An upstream's final response head (interim 1xx answers are read and dropped)."""
    for _ in range(MAX_INTERIM + 1):
        raw = stream.readline(MAX_START_LINE + 1)
        if not raw:
            raise ConnectionError("the upstream closed without answering")
        found = _STATUS_LINE.fullmatch(_line(raw, MAX_START_LINE))
        if found is None:
            raise Malformed("malformed status line")
        major, minor, code = found[1], found[2], int(found[3])
        reason = (found[4] or b"").decode("latin-1").strip()
        if major != b"1":
            raise Malformed(f"HTTP/{major.decode()}.{minor.decode()} answer")
        fields = read_fields(stream)
        if code == 101:
            raise Malformed("101 Switching Protocols, which no request asked for")
        if code < 200:
            continue
        codings = _codings(fields)
        length = _content_length(fields)
        if codings:
            _chunked_only(codings, length, minor == b"0")
        if method == "HEAD" or code in (204, 304):
            framing = NO_BODY
        elif codings:
            framing = CHUNKED
        else:
            framing = Framing("close") if length is None else Framing("length", length)
        return ResponseHead(code, reason, headers_of(fields), framing, length)
    raise Malformed(f"more than {MAX_INTERIM} interim responses")


class Body:
    """One message body read from ``stream`` by its framing, a piece at a time."""

    def __init__(self, stream: BufferedIOBase, framing: Framing) -> None:
        self.stream = stream
        self.framing = framing
        #: Bytes left: of the body (length), of the current chunk (chunked).
        self.left = framing.length
        self.done = framing.kind == "none" or (framing.kind == "length" and not framing.length)
        self._in_chunk = False
        self._failed: Malformed | OSError | None = None

    def read1(self, size: int = CHUNK) -> bytes:
        """At most ``size`` bytes, no more than one read of the stream gives (so a stream is
        relayed as it comes); b"" once the body has ended. A body that failed (malformed,
        cut) fails again on every later call: the stream is no longer at a known place."""
        if self._failed is not None:
            raise self._failed
        try:
            return self._read1(size)
        except (Malformed, OSError) as exc:
            self._failed = exc
            raise

    def _read1(self, size: int) -> bytes:
        if self.done:
            return b""
        kind = self.framing.kind
        if kind == "close":
            piece = self.stream.read1(size)
            self.done = not piece
            return piece
        if kind == "chunked" and not self.left:
            self.left = self._next_chunk()
            if not self.left:
                read_fields(self.stream)  # trailers: read by the same rules, then dropped
                self.done = True
                return b""
        piece = self.stream.read1(min(size, self.left))
        if not piece:
            raise ConnectionError(f"the peer closed with {self.left} bytes of the body unsent")
        self.left -= len(piece)
        self.done = kind == "length" and not self.left
        return piece

    def __iter__(self) -> Iterator[bytes]:
        while piece := self.read1():
            yield piece

    def _next_chunk(self) -> int:
        if self._in_chunk:
            ending = self.stream.read(2)
            if len(ending) < 2:
                raise ConnectionError("the peer closed in the middle of a chunk")
            if ending != b"\r\n":
                raise Malformed("chunk data not followed by CRLF")
        self._in_chunk = True
        raw = self.stream.readline(MAX_CHUNK_LINE + 1)
        if len(raw) > MAX_CHUNK_LINE:
            raise Malformed(f"chunk size line over {MAX_CHUNK_LINE} bytes")
        if not raw.endswith(b"\n"):
            raise ConnectionError("the peer closed in the middle of a chunk size line")
        found = _CHUNK_LINE.fullmatch(raw)
        if found is None:
            raise Malformed("malformed chunk size line (1 to 16 hex digits, then extensions)")
        return int(found[1], 16)


def is_chunked(headers: Message) -> bool:
    """Whether a request the handler has read (framing checked) is chunked."""
    return bool(headers.get_all("Transfer-Encoding"))


def content_length(headers: Message) -> int | None:
    """A checked request's Content-Length (None: it has none)."""
    value = headers.get("Content-Length")
    return None if value is None else int(value.split(",")[0])


def read_exact(stream: BufferedIOBase, length: int) -> Iterator[bytes]:
    return iter(Body(stream, Framing("length", length)))


def read_chunked(stream: BufferedIOBase) -> Iterator[bytes]:
    """The chunks' data; extensions and trailers are checked and dropped."""
    return iter(Body(stream, CHUNKED))
