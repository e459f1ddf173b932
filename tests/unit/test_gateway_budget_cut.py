"""Budgets are ceilings to the byte (no Docker): with ``response_bytes_per_run = 10000`` the
box receives exactly 10,000 bytes of a longer body, whether the upstream frames it by
length or chunks, in plain HTTP or inside an inspected tunnel, and the receipt records
those bytes: their count, their SHA-256, and that the body is incomplete."""

from __future__ import annotations

import hashlib
import http.client
import ssl
import threading
from pathlib import Path

import pytest

from impyard.gateway.provenance.receipts import RECEIPT_HEADER, Receipt, read_receipts
from impyard.gateway.wiring.ca import ca_certificate
from tests.helpers.gateway import RUN_ID, Served, serve_on_loopback, via_proxy
from tests.helpers.upstream import RawUpstream, Upstream, entity, generated, raw_answer

BUDGET = 10_000
RULE = "gateway.budget.response_bytes_per_run"


def the_cut(s: Served, response: http.client.HTTPResponse) -> bytes:
    """The body the box got of ``response``: short of its end, since the gateway cut it."""
    with pytest.raises(http.client.IncompleteRead) as cut:
        response.read()
    return cut.value.partial


def only_receipt(s: Served) -> Receipt:
    [receipt] = read_receipts(s.home.run_receipts(RUN_ID)).values()
    return receipt


def assert_cut_at_the_budget(s: Served, got: bytes, expected: bytes, receipt_id: str) -> None:
    assert len(got) == BUDGET and got == expected[:BUDGET]
    receipt = only_receipt(s)
    assert receipt.id == receipt_id and not receipt.complete
    assert receipt.bytes == BUDGET and receipt.sha256 == hashlib.sha256(got).hexdigest()
    assert s.gateway.budget.response_bytes == BUDGET
    s.gateway.close()
    [entry] = [e for e in s.journal.read(event="gateway.request") if e["receipt"]]
    assert entry["decision"] == "truncated" and entry["rule"] == RULE
    assert entry["bytes"] == BUDGET and entry["receipt"] == receipt_id


@pytest.mark.parametrize("framing", ["?chunked=1", ""], ids=["chunked", "length"])
def test_a_plain_body_is_cut_at_the_budgets_byte(
    tmp_path: Path, upstream: Upstream, framing: str
) -> None:
    s = serve_on_loopback(tmp_path, upstream, budget={"response_bytes_per_run": BUDGET})
    path = f"/gen/300000{framing}"
    conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=30)
    try:
        conn.request("GET", upstream.url(path))
        response = conn.getresponse()
        assert response.status == 200
        got = the_cut(s, response)
    finally:
        conn.close()
    # Spent: the next request is refused before it leaves.
    status, headers, _ = via_proxy(s.port, "GET", upstream.url("/more"))
    assert status == 429 and headers["X-Impyard-Gateway-Rule"] == RULE
    assert_cut_at_the_budget(s, got, entity(path), response.headers[RECEIPT_HEADER])


@pytest.mark.parametrize("chunked", [True, False], ids=["chunked", "length"])
def test_an_inspected_body_is_cut_at_the_budgets_byte(
    tmp_path: Path, upstream: Upstream, chunked: bool
) -> None:
    body = b"".join(generated(300_000))
    site = RawUpstream(raw_answer(body, chunked=chunked), tls_dir=tmp_path / "site")
    try:
        s = serve_on_loopback(
            tmp_path,
            upstream,
            upstream_ca_file=str(site.ca_file),
            allow=[{"host": "127.0.0.1", "ports": [site.port], "methods": ["GET"]}],
            budget={"response_bytes_per_run": BUDGET},
        )
        trust = ssl.create_default_context(cadata=ca_certificate(s.home.gateway_ca_dir))
        conn = http.client.HTTPSConnection("127.0.0.1", s.port, timeout=30, context=trust)
        conn.set_tunnel("127.0.0.1", site.port)
        try:
            conn.request("GET", "/big")
            response = conn.getresponse()
            assert response.status == 200
            got = the_cut(s, response)
        finally:
            conn.close()
        assert_cut_at_the_budget(s, got, body, response.headers[RECEIPT_HEADER])
    finally:
        site.close()


def test_bodies_relayed_at_once_share_the_budget_to_the_byte(
    tmp_path: Path, upstream: Upstream
) -> None:
    """Two 8,000-byte bodies, each within the budget alone: together the box gets 10,000."""
    s = serve_on_loopback(tmp_path, upstream, budget={"response_bytes_per_run": BUDGET})
    got: list[int] = []
    lock = threading.Lock()

    def fetch(i: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=30)
        try:
            conn.request("GET", upstream.url(f"/gen/8000?n={i}"))
            response = conn.getresponse()
            try:
                size = len(response.read()) if response.status == 200 else 0
            except http.client.IncompleteRead as cut:
                size = len(cut.partial)
        finally:
            conn.close()
        with lock:
            got.append(size)

    threads = [threading.Thread(target=fetch, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    s.gateway.close()
    assert sum(got) == BUDGET and s.gateway.budget.response_bytes == BUDGET
    receipts = read_receipts(s.home.run_receipts(RUN_ID)).values()
    assert sum(r.bytes for r in receipts) == BUDGET
    assert sorted(r.complete for r in receipts) == [False, True]
