"""HTTP/1.1 framing at the gateway (no Docker): what RFC 9112 does not frame for certain is
refused before anything of it reaches an upstream, in plain HTTP and inside an inspected
tunnel, and an upstream's answer breaking the same rules is a 502.

Upstreams here are raw sockets that record every byte they receive, so "the upstream saw
nothing" means no connection and no byte, not merely no request it could parse."""

from __future__ import annotations

import socket
import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest

from impyard.gateway.provenance.receipts import read_receipts
from impyard.gateway.wiring.ca import ca_certificate
from tests.helpers.gateway import RUN_ID, Served, serve_on_loopback
from tests.helpers.upstream import RawUpstream, Upstream

SMUGGLE = "POST /smuggled-by-fold HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n"


@pytest.fixture
def raw() -> Iterator[RawUpstream]:
    server = RawUpstream()
    yield server
    server.close()


def serve(tmp_path: Path, upstream: Upstream, raw: RawUpstream, *methods: str) -> Served:
    rule = {"host": "127.0.0.1", "ports": [raw.port], "methods": list(methods or ["GET"])}
    return serve_on_loopback(
        tmp_path, upstream, allow=[rule], upstream_ca_file=str(raw.ca_file or "") or None
    )


def exchange(port: int, request: bytes) -> bytes:
    """Send ``request`` as it is; the whole answer, up to the gateway's close."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(request)
        return read_all(sock)


def read_all(sock: socket.socket) -> bytes:
    data = b""
    while piece := sock.recv(65536):
        data += piece
    return data


def status_of(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1])


def refused_unseen(s: Served, raw: RawUpstream, answer: bytes, status: int = 400) -> str:
    """The answer was ``status`` from the gateway (rule ``http``), the upstream got nothing,
    and the journal has one refused line for it. The refusal's text."""
    assert status_of(answer) == status, answer
    assert b"X-Impyard-Gateway-Rule: http\r\n" in answer
    assert raw.connections == 0 and raw.seen == b""
    s.gateway.close()
    [entry] = s.journal.read(event="gateway.request")
    assert (entry["status"], entry["rule"], entry["decision"]) == (status, "http", "refused")
    return answer.partition(b"\r\n\r\n")[2].decode()


def test_a_folded_transfer_encoding_is_refused_and_the_upstream_sees_nothing(
    tmp_path: Path, upstream: Upstream, raw: RawUpstream
) -> None:
    """A GET-only host: the folded line would make a lenient upstream read the body as a
    second request, a POST no rule judged."""
    s = serve(tmp_path, upstream, raw, "GET")
    request = (
        f"GET {raw.url('/fold')} HTTP/1.1\r\nHost: 127.0.0.1:{raw.port}\r\nX-Note: a\r\n"
        f" Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n{SMUGGLE}"
    )
    text = refused_unseen(s, raw, exchange(s.port, request.encode()))
    assert text == "impyard gateway: obsolete line folding (a header line starts with whitespace)\n"


def post(raw: RawUpstream, headers: str, body: bytes = b"", version: str = "HTTP/1.1") -> bytes:
    head = f"POST {raw.url('/up')} {version}\r\nHost: x\r\nConnection: close\r\n{headers}\r\n"
    return head.encode() + b"\r\n" + body


@pytest.mark.parametrize(
    "size",
    ["-1", "1_0", "+a", " 1", "0x1", "", "0" * 16 + "1", "1;", "1;a=", '1;a="x', "1;a b", "1\x01"],
)
def test_a_chunk_size_outside_the_grammar_is_refused_unseen(
    tmp_path: Path, upstream: Upstream, raw: RawUpstream, size: str
) -> None:
    s = serve(tmp_path, upstream, raw, "POST")
    body = f"{size}\r\nx\r\n0\r\n\r\n".encode()
    answer = exchange(s.port, post(raw, "Transfer-Encoding: chunked", body))
    assert "malformed chunk size line" in refused_unseen(s, raw, answer)


@pytest.mark.parametrize(
    "size", ["1", "0000000000000001", "1;name=value", '1 ; q="a \\" b";x', "1\t"]
)
def test_chunk_sizes_and_extensions_the_grammar_allows_pass(
    tmp_path: Path, upstream: Upstream, raw: RawUpstream, size: str
) -> None:
    s = serve(tmp_path, upstream, raw, "POST")
    body = f"{size}\r\nx\r\n0;done\r\nX-Trailer: t\r\n\r\n".encode()
    answer = exchange(s.port, post(raw, "Transfer-Encoding: chunked", body))
    s.gateway.close()
    assert status_of(answer) == 200, answer
    # Re-chunked by the gateway: no extension or trailer of the box's goes on.
    assert raw.seen.endswith(b"Transfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n\r\n")


def test_a_chunk_not_ended_by_crlf_is_refused(
    tmp_path: Path, upstream: Upstream, raw: RawUpstream
) -> None:
    s = serve(tmp_path, upstream, raw, "POST")
    body = b"1\r\nxy\r\n0\r\n\r\n"
    answer = exchange(s.port, post(raw, "Transfer-Encoding: chunked", body))
    s.gateway.close()
    assert status_of(answer) == 400 and b"chunk data not followed by CRLF" in answer
    assert b"xy" not in raw.seen  # what had gone on stops at the chunk's one byte


@pytest.mark.parametrize(
    "headers",
    [
        "Content-Length: 0\r\nContent-Length: 91",
        "Content-Length: 5, 6",
        "Content-Length: +5",
        "Content-Length: 5 5",
        "Content-Length:",
        "Content-Length: 1e3",
    ],
)
def test_a_content_length_that_is_not_one_number_is_refused_unseen(
    tmp_path: Path, upstream: Upstream, raw: RawUpstream, headers: str
) -> None:
    s = serve(tmp_path, upstream, raw, "POST")
    answer = exchange(s.port, post(raw, headers, b"x" * 91))
    assert "Content-Length" in refused_unseen(s, raw, answer)


def test_the_same_content_length_twice_is_read_once(
    tmp_path: Path, upstream: Upstream, raw: RawUpstream
) -> None:
    s = serve(tmp_path, upstream, raw, "POST")
    answer = exchange(s.port, post(raw, "Content-Length: 5\r\nContent-Length: 5", b"hello"))
    s.gateway.close()
    assert status_of(answer) == 200
    assert raw.seen.count(b"Content-Length") == 1 and raw.seen.endswith(b"\r\n\r\nhello")


@pytest.mark.parametrize(
    ("headers", "version", "status"),
    [
        ("Transfer-Encoding: gzip, chunked", "HTTP/1.1", 501),
        ("Transfer-Encoding: chunked, gzip", "HTTP/1.1", 400),
        ("Transfer-Encoding: identity", "HTTP/1.1", 400),
        ("Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked", "HTTP/1.1", 400),
        ("Transfer-Encoding: ,chunked", "HTTP/1.1", 400),
        ("Transfer-Encoding: chunked\r\nContent-Length: 6", "HTTP/1.1", 400),
        ("Content-Length: 6\r\nTransfer-Encoding: chunked", "HTTP/1.1", 400),
        ("Transfer-Encoding: chunked", "HTTP/1.0", 400),
    ],
)
def test_a_transfer_encoding_other_than_one_final_chunked_is_refused_unseen(
    tmp_path: Path, upstream: Upstream, raw: RawUpstream, headers: str, version: str, status: int
) -> None:
    s = serve(tmp_path, upstream, raw, "POST")
    answer = exchange(s.port, post(raw, headers, b"1\r\nx\r\n0\r\n\r\n", version))
    text = refused_unseen(s, raw, answer, status)
    assert "Transfer-Encoding" in text or "transfer coding gzip is not supported" in text


@pytest.mark.parametrize(
    "line",
    [
        b"Bad Name: x",
        b"X(y): z",
        b"X-Key : z",
        b"\x00X: z",
        b"No-Colon",
        b"X-Key: sk-hidden\x01value",
        b"X-Key: sk-hidden\x00value",
        b"X-Key: sk-hidden\rvalue",
        b"X-Key: sk-hidden\x7fvalue",
        b"X-Key: sk-hidden\x1bvalue",
    ],
)
def test_a_field_name_or_value_outside_the_grammar_is_refused_unseen(
    tmp_path: Path, upstream: Upstream, raw: RawUpstream, line: bytes
) -> None:
    s = serve(tmp_path, upstream, raw, "GET")
    request = f"GET {raw.url('/h')} HTTP/1.1\r\nHost: x\r\n".encode() + line + b"\r\n\r\n"
    text = refused_unseen(s, raw, exchange(s.port, request))
    assert "header field" in text
    # Only a name known to be a token is shown: a value may hold a secret.
    assert "sk-hidden" not in text and "sk-hidden" not in s.journal.path.read_text()


def test_more_than_one_host_is_refused(
    tmp_path: Path, upstream: Upstream, raw: RawUpstream
) -> None:
    s = serve(tmp_path, upstream, raw, "GET")
    request = f"GET {raw.url('/h')} HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n".encode()
    assert "more than one Host" in refused_unseen(s, raw, exchange(s.port, request))


def test_an_http11_request_without_host_is_refused_and_http10_is_not(
    tmp_path: Path, upstream: Upstream, raw: RawUpstream
) -> None:
    s = serve(tmp_path, upstream, raw, "GET")
    request = f"GET {raw.url('/no-host')} HTTP/1.1\r\nConnection: close\r\n\r\n".encode()
    assert "without a Host header" in refused_unseen(s, raw, exchange(s.port, request))
    s = serve(tmp_path / "again", upstream, raw, "GET")
    answer = exchange(s.port, f"GET {raw.url('/old')} HTTP/1.0\r\n\r\n".encode())
    s.gateway.close()
    assert status_of(answer) == 200 and raw.seen.startswith(b"GET /old HTTP/1.1\r\n")


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nContent-Length: 91\r\n\r\n", b"conflicting"),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
            b"both Transfer-Encoding and Content-Length",
        ),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", b"Transfer-Encoding"),
        (b"HTTP/1.1 200 OK\r\nX-A: a\r\n Transfer-Encoding: chunked\r\n\r\n", b"folding"),
        (b"HTTP/1.1 200 OK\r\nX-A: a\x01b\r\n\r\n", b"control characters"),
        (b"HTTP/1.1 101 Switching Protocols\r\n\r\n", b"101"),
        (b"HTTP/1.1 2OO OK\r\n\r\n", b"malformed status line"),
    ],
)
def test_an_upstream_answer_outside_the_grammar_is_a_502(
    tmp_path: Path, upstream: Upstream, answer: bytes, reason: bytes
) -> None:
    liar = RawUpstream(answer)
    try:
        s = serve(tmp_path, upstream, liar, "GET")
        request = f"GET {liar.url('/x')} HTTP/1.1\r\nHost: x\r\n\r\n".encode()
        got = exchange(s.port, request)
        s.gateway.close()
    finally:
        liar.close()
    assert status_of(got) == 502 and b"malformed answer" in got and reason in got, got
    [entry] = s.journal.read(event="gateway.request")
    assert entry["decision"] == "failed" and entry["receipt"] is None


def test_an_upstream_chunk_size_outside_the_grammar_cuts_the_body(
    tmp_path: Path, upstream: Upstream
) -> None:
    liar = RawUpstream(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n-1\r\n")
    try:
        s = serve(tmp_path, upstream, liar, "GET")
        got = exchange(s.port, f"GET {liar.url('/x')} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        s.gateway.close()
    finally:
        liar.close()
    # The head had gone out: the box gets the two good bytes, then no last chunk.
    assert got.endswith(b"\r\n\r\n2\r\nok\r\n")
    [receipt] = read_receipts(s.home.run_receipts(RUN_ID)).values()
    assert (receipt.bytes, receipt.complete) == (2, False)
    assert s.journal.read(event="gateway.request")[0]["decision"] == "failed"


def through_inspected_tunnel(s: Served, raw: RawUpstream, request: bytes) -> bytes:
    trust = ssl.create_default_context(cadata=ca_certificate(s.home.gateway_ca_dir))
    with socket.create_connection(("127.0.0.1", s.port), timeout=30) as sock:
        target = f"127.0.0.1:{raw.port}"
        sock.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
        assert sock.recv(65536).startswith(b"HTTP/1.1 200")
        with trust.wrap_socket(sock, server_hostname="127.0.0.1") as tls:
            tls.sendall(request)
            return read_all(tls)


@pytest.mark.parametrize(
    "head",
    [
        "GET /fold HTTP/1.1\r\nHost: {host}\r\nX-Note: a\r\n Transfer-Encoding: chunked\r\n\r\n"
        + f"0\r\n\r\n{SMUGGLE}",
        "GET /cl HTTP/1.1\r\nHost: {host}\r\nContent-Length: 0\r\nContent-Length: 91\r\n\r\n",
        "GET /te HTTP/1.1\r\nHost: {host}\r\nTransfer-Encoding: chunked\r\n\r\n+a\r\n",
    ],
)
def test_inside_an_inspected_tunnel_the_same_rules_hold(
    tmp_path: Path, upstream: Upstream, head: str
) -> None:
    site = RawUpstream(tls_dir=tmp_path / "site")
    try:
        s = serve(tmp_path, upstream, site, "GET")
        request = head.replace("{host}", f"127.0.0.1:{site.port}").encode()
        answer = through_inspected_tunnel(s, site, request)
        s.gateway.close()
    finally:
        site.close()
    assert status_of(answer) == 400 and b"X-Impyard-Gateway-Rule: http" in answer
    assert b"the Host header" not in answer  # refused for its framing, not its host
    assert site.connections == 0 and site.seen == b""
    inner = [e for e in s.journal.read(event="gateway.request") if e["method"] == "GET"]
    assert [(e["status"], e["rule"]) for e in inner] == [(400, "http")]


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 505),
        (b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\n\r\n", 414),
        (b"GET / HTTP/1.1\r\n" + b"X-A: b\r\n" * 101 + b"\r\n", 431),
        (b"GET / HTTP/1.1\r\nX-A: " + b"b" * 70_000 + b"\r\n\r\n", 431),
        (b"GET /  HTTP/1.1\r\n\r\n", 400),
        (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", 400),
    ],
    ids=["http2-preface", "long-line", "many-fields", "large-section", "two-spaces", "tls"],
)
def test_a_head_outside_the_grammar_or_its_bounds_is_refused(
    tmp_path: Path, upstream: Upstream, raw: RawUpstream, request_bytes: bytes, status: int
) -> None:
    s = serve(tmp_path, upstream, raw, "GET")
    answer = exchange(s.port, request_bytes)
    s.gateway.close()
    assert status_of(answer) == status, answer[:200]
    assert raw.connections == 0


def test_one_empty_line_before_a_request_line_is_skipped(
    tmp_path: Path, upstream: Upstream, raw: RawUpstream
) -> None:
    s = serve(tmp_path, upstream, raw, "GET")
    request = f"\r\nGET {raw.url('/after-crlf')} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    answer = exchange(s.port, request.encode())
    s.gateway.close()
    assert status_of(answer) == 200 and raw.seen.startswith(b"GET /after-crlf HTTP/1.1\r\n")
