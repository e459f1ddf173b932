"""The proxy's behaviour on a host-loopback listener (no Docker).

Every upstream here listens on 127.0.0.1 only.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from impyard.gateway import Gateway, write_ready
from impyard.home import Home
from impyard.journal.log import Journal
from impyard.policy.models import GatewayPolicy
from tests.helpers.gateway import (
    RUN_ID,
    SECRET,
    Served,
    read_until_closed,
    serve_on_loopback,
    via_proxy,
)
from tests.helpers.upstream import Upstream


@pytest.fixture
def served(tmp_path: Path, upstream: Upstream) -> Iterator[Served]:
    s = serve_on_loopback(tmp_path, upstream)
    yield s
    s.gateway.close()


def test_allowed_get_is_forwarded(served: Served, upstream: Upstream) -> None:
    status, _, body = via_proxy(
        served.port, "GET", upstream.url("/page?q=1"), headers={"Proxy-Authorization": "x"}
    )
    assert status == 200 and body == b"hello from upstream GET /page?q=1\n"
    assert upstream.seen[0].headers["Host"] == f"127.0.0.1:{upstream.port}"
    assert "Proxy-Authorization" not in upstream.seen[0].headers
    served.gateway.close()  # workers finish their journal lines before close returns
    entry = served.journal.read(event="gateway.request")[0]
    assert entry["path"] == "/page" and entry["decision"] == "allowed"
    assert entry["status"] == 200 and entry["bytes"] == len(body) and entry["run"] == RUN_ID
    assert entry["rule"] == "gateway.allow[0] 127.0.0.1" and entry["route"] is None


def test_refusals_are_legible(served: Served, upstream: Upstream) -> None:
    status, headers, body = via_proxy(served.port, "GET", "http://127.0.0.2:9/x")
    assert status == 403 and headers["X-Impyard-Gateway-Rule"] == "default-deny"
    assert headers["X-Should-Retry"] == "false"  # a refusal is final: SDKs must not retry
    assert (
        body.decode().count("\n") == 1
        and "no gateway.allow rule matches 127.0.0.2:9" in body.decode()
    )
    status, _, body = via_proxy(served.port, "POST", upstream.url("/form"), body=b"a=1")
    assert status == 403 and b"POST" in body and b"gateway.allow[0] 127.0.0.1" in body
    assert upstream.seen == []


def test_names_resolving_to_loopback_are_refused(served: Served, upstream: Upstream) -> None:
    status, _, body = via_proxy(served.port, "GET", f"http://localhost:{upstream.port}/")
    assert status == 403 and b"non-public address" in body
    assert upstream.seen == []


def test_https_absolute_form_is_refused(served: Served) -> None:
    status, _, body = via_proxy(served.port, "GET", "https://127.0.0.1:443/")
    assert status == 400 and b"CONNECT" in body


def test_credential_route_adds_the_secret_on_the_host(
    served: Served, upstream: Upstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    status, _, body = via_proxy(
        served.port, "POST", f"http://127.0.0.1:{served.port}/route/llm/chat"
    )
    assert status == 502 and b"IMPYARD_TEST_GATEWAY_SECRET is not set" in body
    monkeypatch.setenv("IMPYARD_TEST_GATEWAY_SECRET", SECRET)
    status, _, body = via_proxy(
        served.port,
        "POST",
        f"http://127.0.0.1:{served.port}/route/llm/chat?x=1",
        body=b'{"q": 1}',
        headers={"Authorization": "Bearer forged", "Content-Type": "application/json"},
    )
    assert status == 200 and body == b"hello from upstream POST /v1/chat?x=1\n"
    seen = upstream.seen[-1]
    assert seen.headers["Authorization"] == f"Bearer {SECRET}" and seen.body == b'{"q": 1}'
    # Origin-form (no proxy): the same route.
    status, _, _ = via_proxy(served.port, "GET", "/route/llm/models")
    assert status == 200 and upstream.seen[-1].path == "/v1/models"
    served.gateway.close()
    entries = served.journal.read(event="gateway.request")
    assert [e["route"] for e in entries] == ["llm", "llm", "llm"]
    # Each request is journaled as its handler ends, after the client has its answer: the
    # next request's entry may come first.
    chat = [e for e in entries if e["path"] == "/v1/chat"]
    assert len(chat) == 1 and chat[0]["host"] == "127.0.0.1" and chat[0]["status"] == 200
    assert SECRET not in served.journal.path.read_text()
    assert "forged" not in served.journal.path.read_text()


def test_request_budget_refuses_with_429(tmp_path: Path, upstream: Upstream) -> None:
    s = serve_on_loopback(tmp_path, upstream, budget={"requests_per_run": 3})
    try:
        codes = [via_proxy(s.port, "GET", upstream.url(f"/{i}"))[0] for i in range(4)]
        assert codes == [200, 200, 200, 429]
        _, headers, body = via_proxy(s.port, "GET", upstream.url("/again"))
        assert headers["X-Impyard-Gateway-Rule"] == "gateway.budget.requests_per_run"
        assert headers["X-Should-Retry"] == "false"
        assert b"3 requests per run" in body and len(upstream.seen) == 3
    finally:
        s.gateway.close()


def test_byte_budget(tmp_path: Path, upstream: Upstream) -> None:
    s = serve_on_loopback(tmp_path, upstream, budget={"response_bytes_per_run": 1500})
    try:
        assert via_proxy(s.port, "GET", upstream.url("/big"))[0] == 200
        # 1000 bytes announced, 500 left: the box gets those 500, then the connection ends.
        with pytest.raises(http.client.IncompleteRead) as cut:
            via_proxy(s.port, "GET", upstream.url("/big"))
        assert cut.value.partial == b"x" * 500
        status, _, body = via_proxy(s.port, "GET", upstream.url("/big"))
        assert status == 429 and b"response_bytes_per_run" in body
    finally:
        s.gateway.close()


def test_daily_budget_spans_gateways(tmp_path: Path, upstream: Upstream) -> None:
    for expected in ([200, 200], [200, 429]):
        s = serve_on_loopback(tmp_path, upstream, budget={"requests_per_imp_per_day": 3})
        try:
            assert [via_proxy(s.port, "GET", upstream.url())[0] for _ in range(2)] == expected
        finally:
            s.gateway.close()


@pytest.fixture
def tunnelling(tmp_path: Path, upstream: Upstream) -> Iterator[Served]:
    """A gateway whose CONNECT is a host:port tunnel (``inspect_tls = false``)."""
    s = serve_on_loopback(tmp_path, upstream, inspect_tls=False)
    yield s
    s.gateway.close()


def test_connect_tunnel(tunnelling: Served, upstream: Upstream) -> None:
    served = tunnelling
    with socket.create_connection(("127.0.0.1", served.port), timeout=30) as sock:
        target = f"127.0.0.1:{upstream.port}"
        inner = f"GET /tunnelled HTTP/1.1\r\nHost: {target}\r\nConnection: close\r\n\r\n"
        # The inner request rides in the same packet: the proxy must pass on what it buffered.
        sock.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n{inner}".encode())
        data = read_until_closed(sock)
    assert data.startswith(b"HTTP/1.1 200 Connection Established\r\n")
    assert b"hello from upstream GET /tunnelled" in data
    status, _, body = via_proxy(served.port, "CONNECT", "127.0.0.1:22")
    assert status == 403 and b"127.0.0.1:22" in body
    served.gateway.close()
    # A tunnel is journaled when it closes, which may be after the refusal: match by port.
    entries = {e["port"]: e for e in served.journal.read(event="gateway.request")}
    tunnel, refused = entries[upstream.port], entries[22]
    assert tunnel["method"] == "CONNECT" and tunnel["status"] == 200 and tunnel["bytes"] > 0
    assert refused["method"] == "CONNECT" and refused["status"] == 403


def test_upstream_failure_is_502(tmp_path: Path, upstream: Upstream) -> None:
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))
    dead_port = dead.getsockname()[1]
    dead.close()  # nothing listens there now
    s = serve_on_loopback(
        tmp_path,
        upstream,
        allow=[{"host": "127.0.0.1", "ports": [dead_port], "methods": ["GET"]}],
    )
    try:
        status, _, body = via_proxy(s.port, "GET", f"http://127.0.0.1:{dead_port}/")
        assert status == 502 and b"cannot connect" in body
        s.gateway.close()
        assert s.journal.read()[-1]["decision"] == "failed"
    finally:
        s.gateway.close()


def test_concurrent_requests_lose_no_journal_lines(served: Served, upstream: Upstream) -> None:
    results: list[int] = []
    lock = threading.Lock()

    def one(i: int) -> None:
        status = via_proxy(served.port, "GET", upstream.url(f"/c{i}"))[0]
        with lock:
            results.append(status)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(50)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert results == [200] * 50
    served.gateway.close()
    lines = served.journal.path.read_text().splitlines()
    assert len(lines) == 50
    assert sorted(json.loads(line)["path"] for line in lines) == sorted(f"/c{i}" for i in range(50))


def test_close_is_idempotent_and_stops_serving(tmp_path: Path, upstream: Upstream) -> None:
    s = serve_on_loopback(tmp_path, upstream)
    assert s.gateway.serving
    s.gateway.close()
    s.gateway.close()
    assert not s.gateway.serving
    with pytest.raises(OSError):
        via_proxy(s.port, "GET", upstream.url())


def test_disabled_gateway_gives_no_env(tmp_path: Path) -> None:
    home = Home(tmp_path)
    gateway = Gateway.start(
        GatewayPolicy(enabled=False),
        home=home,
        imp="yuko",
        run_id=RUN_ID,
        journal=Journal(home.journal),
    )
    gateway.attach(1)  # a no-op: no listener anywhere
    assert gateway.proxy_env() == {} and not gateway.serving
    gateway.close()


def test_proxy_env_and_ready_file(served: Served, tmp_path: Path) -> None:
    env = served.gateway.proxy_env()
    url = f"http://127.0.0.1:{served.port}"
    assert env["HTTP_PROXY"] == env["https_proxy"] == url
    # Loopback is the gateway itself: clients must call routes directly, not tunnel to them.
    for name in ("NO_PROXY", "no_proxy"):
        assert set(env[name].split(",")) == {"127.0.0.1", "localhost", "::1"}
    signal = tmp_path / "signal"
    signal.mkdir()
    assert write_ready(signal).read_text() == "ready\n"


def test_connect_tunnel_client_waits_for_200(tunnelling: Served, upstream: Upstream) -> None:
    served = tunnelling
    target = f"127.0.0.1:{upstream.port}"
    with socket.create_connection(("127.0.0.1", served.port), timeout=30) as sock:
        sock.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
        head = b""
        for _ in range(100):  # the 200 arrives before the client says anything more
            head += sock.recv(1)
            if head.endswith(b"\r\n\r\n"):
                break
        assert head.startswith(b"HTTP/1.1 200")
        sock.sendall(f"GET /later HTTP/1.1\r\nHost: {target}\r\nConnection: close\r\n\r\n".encode())
        data = read_until_closed(sock)
    assert b"hello from upstream GET /later" in data


def test_expect_continue_and_chunked_bodies_reach_a_route(
    served: Served, upstream: Upstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("IMPYARD_TEST_GATEWAY_SECRET", SECRET)
    conn = http.client.HTTPConnection("127.0.0.1", served.port, timeout=30)
    try:
        conn.request(
            "POST",
            "/route/llm/upload",
            body=iter([b"part1-", b"part2"]),
            headers={"Expect": "100-continue"},
            encode_chunked=True,
        )
        response = conn.getresponse()
        assert response.status == 200 and response.read().endswith(b"/v1/upload\n")
    finally:
        conn.close()
    seen = upstream.seen[-1]
    assert seen.body == b"part1-part2" and seen.headers["Transfer-Encoding"] == "chunked"
    assert "Expect" not in seen.headers and seen.headers["Authorization"] == f"Bearer {SECRET}"
