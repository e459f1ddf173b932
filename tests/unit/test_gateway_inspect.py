"""Inspected HTTPS on a host-loopback listener (no Docker): the gateway terminates TLS
with its own CA, judges every inner request by method and path, and verifies the upstream
itself. Upstreams are TLS servers on 127.0.0.2 with their own CA (an owner's internal
service, trusted through box.extra_ca_file)."""

from __future__ import annotations

import http.client
import socket
import ssl
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from impyard.gateway import Gateway
from impyard.gateway.wiring.ca import ca_certificate
from impyard.journal.log import Journal
from impyard.policy.models import GatewayPolicy
from tests.helpers.gateway import gateway_home, loopback_listener
from tests.tls_server import HOST, TlsPageServer

RUN_ID = "run-20260711T120000Z-0123456789"
PAGE = b"<html>the internal page</html>\n"


@dataclass
class Inspecting:
    gateway: Gateway
    port: int
    journal: Journal
    site: TlsPageServer
    trust: ssl.SSLContext  # what a box trusts: the data root's inspection CA


def start(tmp_path: Path, site: TlsPageServer, *, trust_site: bool = True) -> Inspecting:
    listener, port = loopback_listener(16)
    home, journal = gateway_home(tmp_path)
    policy = GatewayPolicy.model_validate(
        {
            "port": port,
            "allow": [{"host": HOST, "ports": [site.port], "methods": ["GET", "HEAD"]}],
        }
    )
    gateway = Gateway.start(
        policy,
        home=home,
        imp="yuko",
        run_id=RUN_ID,
        journal=journal,
        upstream_ca_file=str(site.ca_file) if trust_site else None,
    )
    gateway.serve(listener)
    trust = ssl.create_default_context(cadata=ca_certificate(home.gateway_ca_dir))
    return Inspecting(gateway, port, journal, site, trust)


@pytest.fixture
def site(tmp_path: Path) -> Iterator[TlsPageServer]:
    with TlsPageServer(tmp_path / "site", {"/page.html": PAGE}) as server:
        yield server


@pytest.fixture
def inspecting(tmp_path: Path, site: TlsPageServer) -> Iterator[Inspecting]:
    s = start(tmp_path, site)
    yield s
    s.gateway.close()


def through_tunnel(
    s: Inspecting, method: str, path: str, body: bytes | None = None, **headers: str
) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPSConnection("127.0.0.1", s.port, timeout=30, context=s.trust)
    conn.set_tunnel(HOST, s.site.port)
    try:
        conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        conn.close()


def test_an_allowed_get_is_served_inside_the_tunnel_with_the_gateways_certificate(
    inspecting: Inspecting,
) -> None:
    status, _, body = through_tunnel(inspecting, "GET", "/page.html")
    assert status == 200 and body == PAGE
    assert inspecting.site.requests == [("GET", "/page.html")]
    inspecting.gateway.close()
    entries = inspecting.journal.read(event="gateway.request")
    connect = next(e for e in entries if e["method"] == "CONNECT")
    inner = next(e for e in entries if e["method"] == "GET")
    assert connect["decision"] == "allowed" and connect["reason"] == "inspected"
    assert (inner["host"], inner["path"], inner["status"]) == (HOST, "/page.html", 200)
    assert inner["bytes"] == len(PAGE)


def test_a_post_to_a_get_only_host_is_refused_inside_the_tunnel(
    inspecting: Inspecting,
) -> None:
    status, headers, body = through_tunnel(inspecting, "POST", "/upload", body=b"secret=1")
    assert status == 403
    assert headers["X-Impyard-Gateway-Rule"].startswith("gateway.allow[0]")
    assert b"POST" in body and body.count(b"\n") == 1
    assert inspecting.site.requests == [] and inspecting.site.uploaded == 0


def test_python_clients_trusting_the_bundle_need_no_verification_off(
    inspecting: Inspecting,
) -> None:
    """urllib through the proxy, verifying with the CA a box's bundle holds (no -k)."""
    proxy = f"http://127.0.0.1:{inspecting.port}"
    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler({"https": proxy}),
        urllib.request.HTTPSHandler(context=inspecting.trust),
    )
    with opener.open(inspecting.site.url("/page.html"), timeout=30) as response:
        assert response.read() == PAGE


def test_an_untrusted_upstream_certificate_is_refused(tmp_path: Path, site: TlsPageServer) -> None:
    s = start(tmp_path, site, trust_site=False)
    try:
        status, headers, body = through_tunnel(s, "GET", "/page.html")
    finally:
        s.gateway.close()
    assert status == 502
    assert headers["X-Impyard-Gateway-Rule"] == "gateway.upstream_tls"
    assert b"failed verification" in body and body.count(b"\n") == 1
    assert site.requests == []


def test_anything_but_http_inside_the_tunnel_is_refused(inspecting: Inspecting) -> None:
    raw = socket.create_connection(("127.0.0.1", inspecting.port), timeout=30)
    target = f"{HOST}:{inspecting.site.port}"
    raw.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
    head = b""
    while not head.endswith(b"\r\n\r\n"):
        head += raw.recv(1)
    assert head.startswith(b"HTTP/1.1 200")
    with inspecting.trust.wrap_socket(raw, server_hostname=HOST) as tls:
        tls.sendall(b"\x16\x03garbage that is no request\r\n\r\n")
        answer = tls.recv(65536)
    assert answer.startswith(b"HTTP/1.1 400") and b"X-Impyard-Gateway-Rule: http" in answer
    assert inspecting.site.requests == []


def test_a_request_naming_another_host_inside_the_tunnel_is_refused(
    inspecting: Inspecting,
) -> None:
    status, _, body = through_tunnel(inspecting, "GET", "/page.html", Host="example.com")
    assert status == 400 and b"another host" in body
    status, _, body = through_tunnel(inspecting, "GET", "https://example.com/page.html")
    assert status == 400 and b"leaves the tunnel" in body
    assert inspecting.site.requests == []


def test_a_box_that_does_not_trust_the_ca_ends_at_the_handshake(
    inspecting: Inspecting,
) -> None:
    conn = http.client.HTTPSConnection(
        "127.0.0.1", inspecting.port, timeout=30, context=ssl.create_default_context()
    )
    conn.set_tunnel(HOST, inspecting.site.port)
    try:
        with pytest.raises(ssl.SSLCertVerificationError):
            conn.request("GET", "/page.html")
    finally:
        conn.close()
    inspecting.gateway.close()
    (connect,) = inspecting.journal.read(event="gateway.request")
    assert connect["decision"] == "refused" and "handshake" in connect["reason"]
    assert inspecting.site.requests == []


def test_leaves_are_minted_per_host_and_reused(tmp_path: Path, site: TlsPageServer) -> None:
    s = start(tmp_path, site)
    try:
        assert through_tunnel(s, "GET", "/page.html")[0] == 200
        leaves = sorted((s.gateway.home.gateway_ca_dir / "leaves").iterdir())
        assert [p.name for p in leaves] == [f"{HOST}.pem"]
        assert leaves[0].stat().st_mode & 0o777 == 0o600
        first = leaves[0].read_bytes()
        assert through_tunnel(s, "GET", "/page.html")[0] == 200
        assert leaves[0].read_bytes() == first
    finally:
        s.gateway.close()
