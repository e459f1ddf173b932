"""The gateway serving real boxes (``--network none``) on their own loopback.

Upstreams listen on the host's 127.0.0.1 only; the boxes have no interface
but ``lo``, so nothing they do can send a packet anywhere else.
"""

from __future__ import annotations

import json
import secrets
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import pytest

from impyard.gateway import (
    BOX_READY_PATH,
    BOX_SIGNAL_DIR,
    WAIT_FOR_ENV,
    Gateway,
    GatewayError,
    connect_in_netns,
    listen_in_netns,
    write_ready,
)
from impyard.home import Home
from impyard.journal.log import Journal
from impyard.policy.models import GatewayPolicy
from tests.helpers.images import BOX_IMAGE
from tests.helpers.upstream import RawUpstream, Upstream

pytestmark = pytest.mark.docker

GATEWAY_PORT = 3128
SECRET = "sk-box-test-" + "9c1e5f" * 4
SECRET_ENV = "IMPYARD_TEST_BOX_SECRET"
BODY_SENTINEL = "BODY-SENTINEL-4471"
# Refuse to probe anything if the box somehow had a route: no packet may leave it.
NO_ROUTE_GUARD = '[ "$(wc -l < /proc/net/route)" -le 1 ] || { echo HAS-ROUTES; exit 9; }\n'


@pytest.fixture
def client() -> Iterator[Any]:
    c = docker.from_env(timeout=60)
    yield c
    c.close()


@dataclass
class BoxRun:
    exit_code: int
    output: str
    gateway: Gateway
    journal: Journal


class Harness:
    def __init__(self, client: Any, tmp_path: Path, upstream: Upstream, test_id: str) -> None:
        self.client = client
        self.tmp_path = tmp_path
        self.upstream = upstream
        self.test_id = test_id
        self.home = Home(tmp_path / "home")
        self.home.root.mkdir(parents=True, exist_ok=True)
        self.journal = Journal(self.home.journal)
        self.signal = tmp_path / "signal"
        self.signal.mkdir(mode=0o755)

    def rules(self, **extra: Any) -> GatewayPolicy:
        data: dict[str, Any] = {
            "port": GATEWAY_PORT,
            "allow": [
                {"host": "127.0.0.1", "ports": [self.upstream.port], "methods": ["GET", "HEAD"]}
            ],
            "route": [
                {
                    "name": "llm",
                    "upstream": f"http://127.0.0.1:{self.upstream.port}/v1",
                    "header": "Authorization",
                    "value": "Bearer {secret}",
                    "secret_env": SECRET_ENV,
                    "methods": ["POST"],
                    "allow_private": True,
                }
            ],
        }
        data.update(extra)
        return GatewayPolicy.model_validate(data)

    def gateway(self, rules: GatewayPolicy) -> Gateway:
        return Gateway.start(
            rules, home=self.home, imp="yuko", run_id=self.test_id, journal=self.journal
        )

    def create(self, gateway: Gateway, script: str) -> Any:
        """A hardened box; box-init waits for the gateway's ready file, then runs ``script``."""
        return self.client.containers.create(
            BOX_IMAGE,
            entrypoint=["/opt/impyard/bin/box-init"],
            command=["/bin/sh", "-c", script],
            environment={**gateway.proxy_env(), WAIT_FOR_ENV: BOX_READY_PATH},
            network_mode="none",
            user="65532:65532",
            read_only=True,
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            pids_limit=256,
            tmpfs={"/tmp": "size=67108864,mode=1777,nosuid,nodev"},
            volumes={str(self.signal): {"bind": BOX_SIGNAL_DIR, "mode": "ro"}},
            labels={"impyard.run": self.test_id},
        )

    def run(self, script: str, rules: GatewayPolicy, *, during: Any = None) -> BoxRun:
        """The pipeline's wiring: create, start, attach to State.Pid, write ready, wait, close."""
        gateway = self.gateway(rules)
        container = self.create(gateway, script)
        try:
            container.start()
            container.reload()
            gateway.attach(int(container.attrs["State"]["Pid"]))
            write_ready(self.signal)
            if during is not None:
                during(gateway, int(container.attrs["State"]["Pid"]))
            exit_code = int(container.wait(timeout=120)["StatusCode"])
            output = container.logs(stdout=True, stderr=True).decode(errors="replace")
        finally:
            gateway.close()
            container.remove(force=True)
        return BoxRun(exit_code, output, gateway, self.journal)


@pytest.fixture
def harness(client: Any, tmp_path: Path, upstream: Upstream) -> Harness:
    return Harness(client, tmp_path, upstream, f"gwtest-{secrets.token_hex(4)}")


def raw_request(request_line: str, body: str = "") -> str:
    """Shell that speaks raw HTTP to the gateway with nc and prints the whole answer."""
    head = f"{request_line}\\r\\nHost: x\\r\\nContent-Length: {len(body)}\\r\\n\\r\\n{body}"
    return f"printf '{head}' | nc 127.0.0.1 {GATEWAY_PORT}; echo\n"


def test_allowed_get_from_the_box(harness: Harness, upstream: Upstream) -> None:
    script = f"wget -q -O - {upstream.url('/hello?token=abc')}; echo rc=$?\n"
    result = harness.run(script, harness.rules())
    assert "hello from upstream GET /hello?token=abc" in result.output, result.output
    assert "rc=0" in result.output
    [entry] = result.journal.read(event="gateway.request")
    assert entry["decision"] == "allowed" and entry["status"] == 200
    assert entry["path"] == "/hello" and entry["host"] == "127.0.0.1"
    assert entry["port"] == upstream.port and entry["imp"] == "yuko"
    assert "token" not in json.dumps(entry)


def test_refusals_from_the_box(harness: Harness, upstream: Upstream) -> None:
    script = (
        "wget -q -O - http://127.0.0.2:9/; echo wget-denied-rc=$?\n"
        + raw_request("GET http://127.0.0.2:9/x HTTP/1.1")
        + raw_request(f"POST {upstream.url('/form')} HTTP/1.1", f"a={BODY_SENTINEL}")
    )
    result = harness.run(script, harness.rules())
    out = result.output
    assert "wget-denied-rc=1" in out, out
    assert "HTTP/1.1 403 Forbidden" in out
    assert "impyard gateway: no gateway.allow rule matches 127.0.0.2:9" in out
    assert "impyard gateway: POST to 127.0.0.1:" in out
    assert "not allowed by gateway.allow[0] 127.0.0.1 (methods: GET, HEAD)" in out
    assert upstream.seen == []
    entries = result.journal.read(event="gateway.request")
    assert len(entries) == 3
    assert {e["status"] for e in entries} == {403}
    assert {e["decision"] for e in entries} == {"refused"}
    assert BODY_SENTINEL not in result.journal.path.read_text()


def test_a_folded_header_smuggle_from_the_box_reaches_no_upstream(harness: Harness) -> None:
    """A GET-only host; the folded Transfer-Encoding would make a lenient upstream read the
    body as a second request (a POST no rule judged). The upstream records every byte."""
    raw = RawUpstream()
    try:
        request = (
            f"GET {raw.url('/fold')} HTTP/1.1\\r\\nHost: 127.0.0.1:{raw.port}\\r\\n"
            "X-Note: a\\r\\n Transfer-Encoding: chunked\\r\\n\\r\\n0\\r\\n\\r\\n"
            "POST /smuggled-by-fold HTTP/1.1\\r\\nHost: 127.0.0.1\\r\\n"
            "Content-Length: 0\\r\\n\\r\\n"
        )
        rule = {"host": "127.0.0.1", "ports": [raw.port], "methods": ["GET", "HEAD"]}
        script = f"printf '{request}' | nc 127.0.0.1 {GATEWAY_PORT}; echo\n"
        result = harness.run(script, harness.rules(allow=[rule]))
    finally:
        raw.close()
    assert "HTTP/1.1 400 Bad Request" in result.output, result.output
    assert "impyard gateway: obsolete line folding" in result.output
    assert raw.connections == 0 and raw.seen == b""
    [entry] = result.journal.read(event="gateway.request")
    assert (entry["method"], entry["status"], entry["rule"]) == ("GET", 400, "http")


def test_credential_route_never_shows_the_secret_to_the_box(
    harness: Harness, upstream: Upstream, client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SECRET_ENV, SECRET)
    script = (
        # Origin-form straight to the gateway (-Y off): busybox wget turns POST into GET
        # when it goes through a proxy.
        f"wget -Y off -q -O /tmp/route.out --post-data '{BODY_SENTINEL}' "
        f"http://127.0.0.1:{GATEWAY_PORT}/route/llm/chat?key=q; echo route-rc=$?\n"
        "cat /tmp/route.out\n"
        "echo '--- env'; env\n"
        "echo '--- proc'; for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do "
        "tr '\\0' '\\n' < $f; done 2>/dev/null\n"
        "echo '--- files'; find /tmp /opt/impyard -type f -exec cat {} + 2>/dev/null\n"
        "echo END-PROBES; sleep 600\n"  # kept alive so the host can export its filesystem
    )
    seen_export: list[bool] = []

    def inspect(gateway: Gateway, pid: int) -> None:
        container = next(
            iter(client.containers.list(filters={"label": f"impyard.run={harness.test_id}"}))
        )
        for _ in range(600):  # until the box printed its probes (bounded)
            if b"END-PROBES" in container.logs():
                break
            threading.Event().wait(0.1)
        blob = b"".join(container.export())
        seen_export.append(SECRET.encode() in blob)
        container.kill()

    result = harness.run(script, harness.rules(), during=inspect)
    assert "route-rc=0" in result.output, result.output
    assert "hello from upstream POST /v1/chat?key=q" in result.output
    assert upstream.seen[0].headers["Authorization"] == f"Bearer {SECRET}"
    assert upstream.seen[0].body == BODY_SENTINEL.encode()
    assert "--- env" in result.output and "--- files" in result.output
    assert SECRET not in result.output
    assert seen_export == [False]
    journal_text = result.journal.path.read_text()
    assert SECRET not in journal_text and BODY_SENTINEL not in journal_text
    assert "hello from upstream" not in journal_text
    [entry] = result.journal.read(event="gateway.request")
    assert entry["route"] == "llm" and entry["path"] == "/v1/chat" and entry["status"] == 200


def test_budget_of_three_refuses_the_fourth(harness: Harness, upstream: Upstream) -> None:
    script = (
        "for i in 1 2 3 4; do "
        f"wget -q -O /dev/null {upstream.url('/n')}$i; echo rc$i=$?; done\n"
        + raw_request(f"GET {upstream.url('/n5')} HTTP/1.1")
    )
    result = harness.run(script, harness.rules(budget={"requests_per_run": 3}))
    out = result.output
    assert [line for line in out.splitlines() if line.startswith("rc")] == [
        "rc1=0",
        "rc2=0",
        "rc3=0",
        "rc4=1",
    ], out
    assert "HTTP/1.1 429 Too Many Requests" in out
    assert "request budget spent: 3 requests per run (gateway.budget.requests_per_run)" in out
    assert len(upstream.seen) == 3
    # A request's line is written once its answer has been relayed, so the box may already
    # be refused its next one: the journal holds every request, not their order.
    statuses = [e["status"] for e in result.journal.read(event="gateway.request")]
    assert sorted(statuses) == [200, 200, 200, 429, 429]


def test_direct_connections_and_dns_fail(harness: Harness, upstream: Upstream) -> None:
    script = (
        NO_ROUTE_GUARD
        + "echo ifaces=$(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ')\n"
        # Control: the proxy path works in this very box.
        + f"wget -q -O - {upstream.url('/via-proxy')} >/dev/null; echo proxy-rc=$?\n"
        + "unset http_proxy HTTP_PROXY https_proxy HTTPS_PROXY\n"
        + f"timeout 5 wget -q -O - {upstream.url('/direct')}; echo direct-wget-rc=$?\n"
        + f"echo x | nc -w 3 127.0.0.1 {upstream.port}; echo direct-nc-rc=$?\n"
        + "nslookup example.com; echo dns-rc=$?\n"
        + "timeout 5 wget -q -O - http://example.com/; echo dns-wget-rc=$?\n"
    )
    result = harness.run(script, harness.rules())
    out = result.output
    assert "HAS-ROUTES" not in out and "ifaces=lo\n" in out, out
    assert "proxy-rc=0" in out
    for probe in ("direct-wget", "direct-nc", "dns", "dns-wget"):
        assert f"{probe}-rc=0" not in out and f"{probe}-rc=" in out, out
    assert [s.path for s in upstream.seen] == ["/via-proxy"]


def test_fifty_concurrent_requests_lose_no_journal_lines(
    harness: Harness, upstream: Upstream
) -> None:
    script = (
        "i=0; while [ $i -lt 50 ]; do i=$((i+1)); "
        f"(wget -q -O /dev/null {upstream.url('/box')}$i && echo ok) & done; wait\n"
        # Then stay up while the host connects 50 more from inside this netns.
        f"i=0; while [ ! -e {BOX_SIGNAL_DIR}/host-done ] && [ $i -lt 1200 ]; do "
        "i=$((i+1)); sleep 0.1; done\n"
    )
    host_statuses: list[int] = []
    lock = threading.Lock()

    def host_requests(gateway: Gateway, pid: int) -> None:
        def one(n: int) -> None:
            with connect_in_netns(pid, "127.0.0.1", GATEWAY_PORT) as sock:
                request = (
                    f"GET {upstream.url(f'/host{n}')} HTTP/1.1\r\n"
                    "Host: x\r\nConnection: close\r\n\r\n"
                )
                sock.sendall(request.encode())
                data = b""
                for _ in range(1000):  # until the gateway closes (Connection: close)
                    piece = sock.recv(65536)
                    if not piece:
                        break
                    data += piece
            with lock:
                host_statuses.append(int(data.split(b" ", 2)[1]))

        threads = [threading.Thread(target=one, args=(n,)) for n in range(50)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        (harness.signal / "host-done").write_text("")

    result = harness.run(script, harness.rules(), during=host_requests)
    assert result.output.count("ok") == 50, result.output
    assert host_statuses == [200] * 50
    entries = result.journal.read(event="gateway.request")
    paths = sorted(e["path"] for e in entries)
    expected = sorted([f"/box{i}" for i in range(1, 51)] + [f"/host{n}" for n in range(50)])
    assert paths == expected
    assert len(result.journal.path.read_text().splitlines()) == 100


def test_requests_fail_once_the_gateway_is_gone(harness: Harness, upstream: Upstream) -> None:
    script = (
        f"wget -q -O /dev/null {upstream.url('/before')}; echo before-rc=$?\n"
        f"i=0; while [ ! -e {BOX_SIGNAL_DIR}/closed ] && [ $i -lt 1200 ]; do "
        "i=$((i+1)); sleep 0.1; done\n"
        f"timeout 5 wget -q -O /dev/null {upstream.url('/after')}; echo after-rc=$?\n"
    )

    def close_when_first_done(gateway: Gateway, pid: int) -> None:
        # The gateway journals a request once its answer went back to the box: closing on
        # the upstream's sight of it alone could cut that answer short on a slow machine.
        for _ in range(300):  # bounded
            if harness.journal.read(event="gateway.request"):
                break
            threading.Event().wait(0.1)
        gateway.close()
        (harness.signal / "closed").write_text("")

    result = harness.run(script, harness.rules(), during=close_when_first_done)
    assert "before-rc=0" in result.output and "after-rc=1" in result.output, result.output
    assert [s.path for s in upstream.seen] == ["/before"]


def test_attach_fails_closed(harness: Harness, client: Any) -> None:
    gateway = harness.gateway(harness.rules())
    with pytest.raises(GatewayError, match="cannot listen"):
        gateway.attach(2**22 + 12345)  # no such pid
    gateway.close()
    # The port is taken inside the box's netns: attach must fail, not fall back.
    container = harness.create(gateway, "sleep 600")
    try:
        container.start()
        container.reload()
        pid = int(container.attrs["State"]["Pid"])
        squatter = listen_in_netns(pid, "127.0.0.1", GATEWAY_PORT)
        try:
            second = harness.gateway(harness.rules())
            with pytest.raises(GatewayError, match="Address already in use"):
                second.attach(pid)
            second.close()
        finally:
            squatter.close()
    finally:
        container.remove(force=True)
    assert not (harness.signal / "gateway.ready").exists()
