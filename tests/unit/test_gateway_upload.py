"""Upload budgets (no Docker): request bodies are held to an allow rule's ``request_bytes``
cap (413) and the run's ``gateway.budget.request_bytes_per_run`` (429). A body announced
too large is refused before anything goes upstream; a chunked body or a tunnel is cut
at the limit's byte, so the upstream sees exactly the limit and nothing past it."""

from __future__ import annotations

import http.client
import socket
import ssl
import time
from pathlib import Path
from typing import Any

from impyard.gateway.wiring.ca import ca_certificate
from tests.helpers.gateway import SECRET, Served, serve_on_loopback, via_proxy
from tests.helpers.upstream import Upstream
from tests.tls_server import HOST, TlsPageServer

RUN_RULE = "gateway.budget.request_bytes_per_run"


def posting(tmp_path: Path, upstream: Upstream, budget: int = 10_485_760, **rule: Any) -> Served:
    return serve_on_loopback(
        tmp_path,
        upstream,
        allow=[{"host": "127.0.0.1", "ports": [upstream.port], "methods": ["POST"], **rule}],
        budget={"request_bytes_per_run": budget},
    )


def answer_of(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    data = b""
    while piece := sock.recv(65536):
        data += piece
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), headers, body


def post_head(upstream: Upstream, length: int | None = None) -> bytes:
    framing = "Transfer-Encoding: chunked" if length is None else f"Content-Length: {length}"
    return f"POST {upstream.url('/up')} HTTP/1.1\r\nHost: x\r\n{framing}\r\n\r\n".encode()


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def journal(s: Served) -> list[dict[str, Any]]:
    s.gateway.close()
    return s.journal.read(event="gateway.request")


def test_a_body_announced_over_the_run_budget_never_reaches_the_upstream(
    tmp_path: Path, upstream: Upstream
) -> None:
    s = posting(tmp_path, upstream, budget=1000)
    with socket.create_connection(("127.0.0.1", s.port), timeout=30) as sock:
        sock.sendall(post_head(upstream, 5000))  # the head only: refused before any body
        status, headers, body = answer_of(sock)
    assert status == 429 and headers["X-Impyard-Gateway-Rule"] == RUN_RULE
    assert headers["X-Should-Retry"] == "false"
    assert b"1000 request bytes per run" in body and RUN_RULE.encode() in body
    assert upstream.seen == [] and upstream.received == 0
    [entry] = journal(s)
    assert entry["status"] == 429 and entry["rule"] == RUN_RULE and entry["request_bytes"] == 0


def test_the_run_budget_spans_requests_and_is_exact(tmp_path: Path, upstream: Upstream) -> None:
    s = posting(tmp_path, upstream, budget=1000)
    assert via_proxy(s.port, "POST", upstream.url("/a"), body=b"a" * 600)[0] == 200
    status, headers, _ = via_proxy(s.port, "POST", upstream.url("/b"), body=b"b" * 600)
    assert status == 429 and headers["X-Impyard-Gateway-Rule"] == RUN_RULE
    assert via_proxy(s.port, "POST", upstream.url("/c"), body=b"c" * 400)[0] == 200
    assert upstream.received == 1000 and [seen.path for seen in upstream.seen] == ["/a", "/c"]
    # A journal line is written once its answer is out, so the lines may come in any order.
    assert {e["path"]: e["request_bytes"] for e in journal(s)} == {"/a": 600, "/b": 0, "/c": 400}


def test_a_large_upload_refused_unread_is_still_answered(
    tmp_path: Path, upstream: Upstream
) -> None:
    """The box is still sending 20 MB when the 429 goes out: the gateway drains what it
    sends instead of resetting the connection, so the client reads the answer."""
    s = posting(tmp_path, upstream, budget=1000)
    status, _, body = via_proxy(s.port, "POST", upstream.url("/big"), body=b"z" * 20_000_000)
    assert status == 429 and RUN_RULE.encode() in body
    assert upstream.received == 0
    s.gateway.close()


def test_a_chunked_body_is_cut_where_the_run_budget_falls(
    tmp_path: Path, upstream: Upstream
) -> None:
    s = posting(tmp_path, upstream, budget=100_000)
    with socket.create_connection(("127.0.0.1", s.port), timeout=30) as sock:
        # Four 30,000-byte chunks: three fit, the fourth passes the budget 10,000 bytes in.
        sock.sendall(post_head(upstream) + b"".join(chunk(b"u" * 30_000) for _ in range(4)))
        status, headers, body = answer_of(sock)
    assert status == 429 and headers["X-Impyard-Gateway-Rule"] == RUN_RULE
    assert RUN_RULE.encode() in body
    wait_for(lambda: len(upstream.seen) == 1)
    assert upstream.received == 100_000 and not upstream.seen[0].complete  # cut at the byte
    [entry] = journal(s)
    assert entry["request_bytes"] == 100_000 and entry["rule"] == RUN_RULE


def test_a_rule_cap_refuses_a_larger_body_with_413(tmp_path: Path, upstream: Upstream) -> None:
    s = posting(tmp_path, upstream, request_bytes=1000)
    rule = "gateway.allow[0] 127.0.0.1"
    assert via_proxy(s.port, "POST", upstream.url("/fits"), body=b"f" * 1000)[0] == 200
    status, headers, body = via_proxy(s.port, "POST", upstream.url("/x"), body=b"x" * 1001)
    assert status == 413 and headers["X-Impyard-Gateway-Rule"] == rule
    assert (
        body
        == (
            f"impyard gateway: request body of 1001 bytes is over the 1000-byte cap of {rule} "
            "(request_bytes)\n"
        ).encode()
    )
    with socket.create_connection(("127.0.0.1", s.port), timeout=30) as sock:
        sock.sendall(post_head(upstream) + b"".join(chunk(b"c" * 400) for _ in range(3)))
        status, headers, body = answer_of(sock)
    assert status == 413 and b"passed the 1000-byte cap" in body
    wait_for(lambda: len(upstream.seen) == 2)
    assert upstream.received == 1000 + 1000  # the third chunk's last 200 bytes never left
    entries = {e["path"]: (e["status"], e["request_bytes"]) for e in journal(s)}
    assert entries == {"/fits": (200, 1000), "/x": (413, 0), "/up": (413, 1000)}
    # The cap is per request: the run's budget is charged only what was sent.
    assert s.gateway.budget.request_bytes == 2000


def test_inspected_https_bodies_are_held_to_the_same_limits(
    tmp_path: Path, upstream: Upstream
) -> None:
    with TlsPageServer(tmp_path / "site", {}) as site:
        s = serve_on_loopback(
            tmp_path,
            upstream,
            upstream_ca_file=str(site.ca_file),
            allow=[{"host": HOST, "ports": [site.port], "methods": ["POST"], "request_bytes": 100}],
            budget={"request_bytes_per_run": 150},
        )
        trust = ssl.create_default_context(cadata=ca_certificate(s.home.gateway_ca_dir))

        def post(size: int) -> tuple[int, str]:
            conn = http.client.HTTPSConnection("127.0.0.1", s.port, timeout=30, context=trust)
            conn.set_tunnel(HOST, site.port)
            try:
                conn.request("POST", "/form", body=b"p" * size)
                response = conn.getresponse()
                response.read()
                return response.status, response.headers["X-Impyard-Gateway-Rule"] or ""
            finally:
                conn.close()

        assert post(101) == (413, f"gateway.allow[0] {HOST}")
        assert post(100)[0] == 200
        assert post(51) == (429, RUN_RULE)
        assert site.uploaded == 100
        s.gateway.close()


def test_route_bodies_count_against_the_run_budget(
    tmp_path: Path, upstream: Upstream, monkeypatch: Any
) -> None:
    monkeypatch.setenv("IMPYARD_TEST_GATEWAY_SECRET", SECRET)
    s = serve_on_loopback(tmp_path, upstream, budget={"request_bytes_per_run": 100})
    route = f"http://127.0.0.1:{s.port}/route/llm/chat"
    assert via_proxy(s.port, "POST", route, body=b"q" * 100)[0] == 200
    status, headers, _ = via_proxy(s.port, "POST", route, body=b"q")
    assert status == 429 and headers["X-Impyard-Gateway-Rule"] == RUN_RULE
    assert upstream.received == 100


def test_a_tunnel_is_cut_once_the_run_has_sent_its_budget(
    tmp_path: Path, upstream: Upstream
) -> None:
    s = serve_on_loopback(
        tmp_path, upstream, inspect_tls=False, budget={"request_bytes_per_run": 1000}
    )
    target = f"127.0.0.1:{upstream.port}"
    inner = f"POST /tunnelled HTTP/1.1\r\nHost: {target}\r\nContent-Length: 5000\r\n\r\n".encode()
    with socket.create_connection(("127.0.0.1", s.port), timeout=30) as sock:
        sock.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
        established = sock.recv(65536)
        assert established.startswith(b"HTTP/1.1 200")
        # After tunnel()'s first read of what the box sent along with its CONNECT: the
        # relay below is what meters the tunnel.
        time.sleep(0.2)
        sock.sendall(inner + b"t" * 500)
        wait_for(lambda: s.gateway.budget.request_bytes == len(inner) + 500)  # relayed
        sock.sendall(b"t" * 4500)  # passes the budget: the tunnel ends
        sock.settimeout(30)
        rest = b""
        while piece := sock.recv(65536):
            rest += piece
    assert rest == b""  # the upstream never answered: it never got its body
    wait_for(lambda: bool(upstream.seen))
    assert len(inner) + upstream.received == 1000  # the budget, to the byte
    assert not upstream.seen[0].complete
    [entry] = journal(s)
    assert entry["method"] == "CONNECT" and entry["decision"] == "truncated"
    assert entry["rule"] == RUN_RULE and entry["request_bytes"] == 1000


def test_bytes_sent_along_with_the_connect_count_against_the_budget(
    tmp_path: Path, upstream: Upstream
) -> None:
    s = serve_on_loopback(
        tmp_path, upstream, inspect_tls=False, budget={"request_bytes_per_run": 100}
    )
    target = f"127.0.0.1:{upstream.port}"
    inner = f"POST /early HTTP/1.1\r\nHost: {target}\r\nContent-Length: 500\r\n\r\n"
    try:
        with socket.create_connection(("127.0.0.1", s.port), timeout=30) as sock:
            # The box's first bytes ride in the CONNECT's own packet.
            connect = f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n"
            sock.sendall((connect + inner).encode() + b"x" * 500)
            data = b""
            while piece := sock.recv(65536):
                data += piece
    finally:
        s.gateway.close()
    assert data.startswith(b"HTTP/1.1 200") and b"upstream" not in data.split(b"\r\n\r\n", 1)[1]
    # The budget's 100 bytes went on (the head and the body's first bytes), nothing more.
    wait_for(lambda: bool(upstream.seen))
    assert upstream.received == 100 - len(inner) and not upstream.seen[0].complete
    (entry,) = [e for e in journal(s) if e["method"] == "CONNECT"]
    assert entry["rule"] == "gateway.budget.request_bytes_per_run"
    assert entry["request_bytes"] == 100


def wait_for(condition: Any, seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)
