"""Fetch receipts on a host-loopback gateway (no Docker): one per relayed response, whose
SHA-256 is of the bytes the upstream sent (chunking undone, gzip kept), its id sent to the
box ahead of the body, its URL without secrets; and ``impyard runs receipts``."""

from __future__ import annotations

import hashlib
import http.client
import json
import socket
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from impyard.gateway.provenance.receipts import RECEIPT_HEADER, Receipt, read_receipts, receipt_url
from impyard.gateway.wiring.ca import ca_certificate
from impyard.home import Home
from impyard.runs.records import manifest
from impyard.runs.records.model import Manifest
from tests.helpers.cli import Cli
from tests.helpers.gateway import RUN_ID, SECRET, Served, serve_on_loopback, via_proxy
from tests.helpers.upstream import Upstream, entity
from tests.tls_server import HOST, TlsPageServer


@pytest.fixture
def served(tmp_path: Path, upstream: Upstream) -> Iterator[Served]:
    s = serve_on_loopback(tmp_path, upstream)
    yield s
    s.gateway.close()


def receipts_of(s: Served) -> list[Receipt]:
    s.gateway.close()  # workers write their receipts and journal lines before close returns
    return list(read_receipts(s.home.run_receipts(RUN_ID)).values())


@pytest.mark.parametrize(
    "path",
    [
        "/gen/200000",  # Content-Length
        "/gen/200000?chunked=1",  # chunked: the receipt hashes the de-chunked bytes
        "/gen/200000?gzip=1",  # gzip: the receipt hashes the compressed bytes, as sent
        "/gen/200000?gzip=1&chunked=1",
        "/gen/200000?close=1",  # no length: the body ends with the connection
    ],
)
def test_the_receipt_hashes_the_bytes_the_upstream_sent(
    served: Served, upstream: Upstream, path: str
) -> None:
    sent = entity(path)
    status, headers, body = via_proxy(served.port, "GET", upstream.url(path))
    assert status == 200 and body == sent  # gzip is relayed as gzip, never decoded
    receipt_id = headers[RECEIPT_HEADER]
    [receipt] = receipts_of(served)
    assert receipt.id == receipt_id and receipt_id.startswith("rcpt_")
    assert receipt.sha256 == hashlib.sha256(sent).hexdigest()
    assert receipt.bytes == len(sent) and receipt.complete
    assert receipt.run == RUN_ID and receipt.method == "GET" and receipt.status == 200
    assert receipt.url == upstream.url(path) and receipt.route is None
    assert receipt.content_type == "application/octet-stream"
    assert receipt.archived is None and receipt.archive_note is None  # the archive is off
    assert receipt.started_at <= receipt.ended_at
    entry = served.journal.read(event="gateway.request")[0]
    assert entry["receipt"] == receipt_id and entry["request_bytes"] == 0
    assert entry["bytes"] == len(sent)


def test_http_client_gives_dechunked_but_still_gzipped_bytes(upstream: Upstream) -> None:
    """What the gateway's relay relies on: HTTPResponse.read1 removes the transfer coding
    and leaves the content coding alone."""
    conn = http.client.HTTPConnection("127.0.0.1", upstream.port, timeout=30)
    try:
        conn.request("GET", "/gen/5000?gzip=1&chunked=1")
        response = conn.getresponse()
        assert response.chunked and response.headers["Content-Encoding"] == "gzip"
        read = b""
        while piece := response.read1(1000):
            read += piece
    finally:
        conn.close()
    assert read == entity("/gen/5000?gzip=1") and read[:2] == b"\x1f\x8b"


def test_inspected_https_gets_receipts_like_plain_http(tmp_path: Path, upstream: Upstream) -> None:
    page = b"<html>an internal page</html>\n"
    with TlsPageServer(tmp_path / "site", {"/page.html": page}) as site:
        s = serve_on_loopback(
            tmp_path,
            upstream,
            upstream_ca_file=str(site.ca_file),
            allow=[{"host": HOST, "ports": [site.port], "methods": ["GET"]}],
        )
        trust = ssl.create_default_context(cadata=ca_certificate(s.home.gateway_ca_dir))
        conn = http.client.HTTPSConnection("127.0.0.1", s.port, timeout=30, context=trust)
        conn.set_tunnel(HOST, site.port)
        try:
            conn.request("GET", "/page.html")
            response = conn.getresponse()
            assert response.status == 200 and response.read() == page
        finally:
            conn.close()
        [receipt] = receipts_of(s)
    assert receipt.id == response.headers[RECEIPT_HEADER]
    assert receipt.url == site.url("/page.html") and receipt.method == "GET"
    assert receipt.sha256 == hashlib.sha256(page).hexdigest() and receipt.complete


def test_an_upstream_cannot_forge_the_receipt_header(served: Served, upstream: Upstream) -> None:
    _, headers, _ = via_proxy(served.port, "GET", upstream.url("/gen/10?receipt=rcpt_forged"))
    [receipt] = receipts_of(served)
    assert headers[RECEIPT_HEADER] == receipt.id != "rcpt_forged"


def test_every_relayed_response_gets_a_receipt_bodiless_ones_too(
    served: Served, upstream: Upstream
) -> None:
    status, headers, body = via_proxy(served.port, "HEAD", upstream.url("/gen/10"))
    assert status == 200 and body == b""
    refused = via_proxy(served.port, "GET", "http://127.0.0.2:9/x")  # refused: no receipt
    assert refused[0] == 403 and RECEIPT_HEADER not in refused[1]
    [receipt] = receipts_of(served)
    assert receipt.id == headers[RECEIPT_HEADER] and receipt.method == "HEAD"
    assert receipt.bytes == 0 and receipt.sha256 == hashlib.sha256(b"").hexdigest()


def test_secret_query_values_are_redacted_and_userinfo_never_kept(
    tmp_path: Path, upstream: Upstream
) -> None:
    names = ["access_token", "token", "key", "sig", "session"]  # "session": an added name
    s = serve_on_loopback(tmp_path, upstream, secret_query_params=names)
    query = "q=cats&Token=tok-123&API%5Fkey=x&session=sess-456&sig=&page=2&token"
    target = f"http://alice:pw-789@127.0.0.1:{upstream.port}/gen/10?{query}"
    status, _, _ = via_proxy(s.port, "GET", target)
    assert status == 200
    assert upstream.seen[-1].path == f"/gen/10?{query}"  # upstream gets the query unchanged
    [receipt] = receipts_of(s)
    assert receipt.url == (
        f"http://127.0.0.1:{upstream.port}/gen/10"
        "?q=cats&Token=REDACTED&API%5Fkey=x&session=REDACTED&sig=REDACTED&page=2&token"
    )
    written = s.home.run_receipts(RUN_ID).read_text() + s.journal.path.read_text()
    for secret in ("tok-123", "sess-456", "alice", "pw-789"):
        assert secret not in written


def test_the_default_names_cover_common_api_keys() -> None:
    from impyard.policy.models import GatewayPolicy

    names = GatewayPolicy().secret_query_params
    url = receipt_url("https", "api.example.com", 443, "/v1?api_key=a&APIKEY=b&x=1", names)
    assert url == "https://api.example.com/v1?api_key=REDACTED&APIKEY=REDACTED&x=1"


@pytest.mark.parametrize(
    ("scheme", "host", "port", "url"),
    [
        ("http", "example.com", 80, "http://example.com/p"),
        ("http", "example.com", 8080, "http://example.com:8080/p"),
        ("https", "example.com", 443, "https://example.com/p"),
        ("https", "example.com", 80, "https://example.com:80/p"),
        ("https", "2001:db8::1", 8443, "https://[2001:db8::1]:8443/p"),
    ],
)
def test_receipt_urls_name_the_port_only_when_not_the_default(
    scheme: str, host: str, port: int, url: str
) -> None:
    assert receipt_url(scheme, host, port, "/p", ()) == url


def test_a_route_receipt_names_the_upstream_url_never_the_secret(
    served: Served, upstream: Upstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("IMPYARD_TEST_GATEWAY_SECRET", SECRET)
    status, headers, _ = via_proxy(
        served.port, "POST", f"http://127.0.0.1:{served.port}/route/llm/chat?x=1", body=b"{}"
    )
    assert status == 200
    [receipt] = receipts_of(served)
    assert receipt.id == headers[RECEIPT_HEADER]
    assert receipt.url == f"http://127.0.0.1:{upstream.port}/v1/chat?x=1"
    assert receipt.route == "llm" and receipt.method == "POST"
    assert SECRET not in served.home.run_receipts(RUN_ID).read_text()
    entry = served.journal.read(event="gateway.request")[0]
    assert entry["receipt"] == receipt.id and entry["request_bytes"] == 2


def read_until_closed(sock: socket.socket) -> bytes:
    data = b""
    while piece := sock.recv(65536):
        data += piece
    return data


@pytest.mark.parametrize("framing", ["chunked=1", "close=1"])
def test_a_body_cut_by_the_budget_gets_a_receipt_of_what_was_relayed(
    tmp_path: Path, upstream: Upstream, framing: str
) -> None:
    s = serve_on_loopback(tmp_path, upstream, budget={"response_bytes_per_run": 100_000})
    path = f"/gen/1000000?{framing}"  # no length, so it cannot be refused up front
    conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=30)
    try:
        conn.request("GET", upstream.url(path))
        response = conn.getresponse()
        # Relayed chunked, so the box sees the cut: the last chunk never comes.
        assert response.status == 200 and response.chunked
        with pytest.raises(http.client.IncompleteRead) as cut:
            response.read()
    finally:
        conn.close()
    got = cut.value.partial
    assert len(got) == 100_000  # the budget, to the byte
    [receipt] = receipts_of(s)
    assert receipt.id == response.headers[RECEIPT_HEADER]
    assert not receipt.complete and receipt.bytes == len(got)
    assert receipt.sha256 == hashlib.sha256(entity(path)[: len(got)]).hexdigest()
    entry = s.journal.read(event="gateway.request")[0]
    assert entry["receipt"] == receipt.id and entry["decision"] == "truncated"


def test_an_http_10_client_gets_an_unknown_length_body_until_close(
    served: Served, upstream: Upstream
) -> None:
    path = "/gen/300000?chunked=1"
    with socket.create_connection(("127.0.0.1", served.port), timeout=30) as sock:
        sock.sendall(f"GET {upstream.url(path)} HTTP/1.0\r\n\r\n".encode())
        answer = read_until_closed(sock)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert b"Connection: close" in head and b"Transfer-Encoding" not in head
    assert body == entity(path)
    [receipt] = receipts_of(served)
    assert receipt.complete and receipt.sha256 == hashlib.sha256(body).hexdigest()


def test_an_upstream_ending_short_of_its_length_is_cut_and_marked(
    tmp_path: Path, upstream: Upstream
) -> None:
    """An upstream announcing 1000 bytes and sending 10 must not leave the box waiting."""
    liar = socket.socket()
    liar.bind(("127.0.0.1", 0))
    liar.listen(1)
    liar_port = liar.getsockname()[1]

    def answer() -> None:
        conn, _ = liar.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n0123456789")

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    s = serve_on_loopback(
        tmp_path,
        upstream,
        allow=[{"host": "127.0.0.1", "ports": [liar_port], "methods": ["GET"]}],
    )
    try:
        with socket.create_connection(("127.0.0.1", s.port), timeout=30) as sock:
            request = f"GET http://127.0.0.1:{liar_port}/ HTTP/1.1\r\nHost: x\r\n\r\n"
            sock.sendall(request.encode())
            answer_bytes = read_until_closed(sock)
        assert answer_bytes.endswith(b"\r\n\r\n0123456789")  # then the gateway closed
        [receipt] = receipts_of(s)
        assert not receipt.complete and receipt.bytes == 10
        assert s.journal.read(event="gateway.request")[0]["decision"] == "failed"
    finally:
        s.gateway.close()
        liar.close()
        thread.join(10)


def write_manifest(home: Home) -> None:
    home.run_dir(RUN_ID).mkdir(parents=True, exist_ok=True)
    manifest.write(
        home,
        Manifest(
            run_id=RUN_ID,
            imp="yuko",
            task_id=None,
            channel=None,
            mode="append",
            base_commit="0" * 40,
            namespace="n_000000000000",
        ),
    )


def test_runs_receipts_lists_a_runs_receipts(cli: Cli, tmp_path: Path, upstream: Upstream) -> None:
    assert cli("init").code == 0
    home = Home(cli.home)
    write_manifest(home)
    s = serve_on_loopback(tmp_path, upstream)
    assert s.home == home
    ids = [
        via_proxy(s.port, "GET", upstream.url(path))[1][RECEIPT_HEADER]
        for path in ("/gen/1000", "/gen/20?token=hidden-value")
    ]
    s.gateway.close()

    table = cli("runs", "receipts", RUN_ID)
    assert table.code == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["receipt", "method", "status", "bytes", "sha256", "archived", "url"]
    first = next(line for line in lines if ids[0] in line)
    sha = hashlib.sha256(entity("/gen/1000")).hexdigest()
    assert first.split()[1:6] == ["GET", "200", "1000", sha[:16], "-"]
    assert upstream.url("/gen/1000") in first
    assert upstream.url("/gen/20?token=REDACTED") in table.stdout
    assert "hidden-value" not in table.stdout

    listed = cli("runs", "receipts", RUN_ID, "--json")
    assert listed.code == 0
    # In the order they were written: when each body had passed, so not always request order.
    document = {r["id"]: r for r in json.loads(listed.stdout)}
    assert set(document) == set(ids)
    assert document[ids[0]]["sha256"] == sha and document[ids[0]]["complete"] is True
    assert set(document[ids[0]]) == set(Receipt.model_fields)


def test_runs_receipts_of_a_run_without_any_is_empty_and_an_unknown_run_an_error(
    cli: Cli,
) -> None:
    assert cli("init").code == 0
    write_manifest(Home(cli.home))
    assert json.loads(cli("runs", "receipts", RUN_ID, "--json").stdout) == []
    missing = cli("runs", "receipts", "run-20260711T120000Z-ffffffffff")
    assert missing.code == 2 and "no run" in missing.stderr
    assert "Traceback" not in missing.stderr
