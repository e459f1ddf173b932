"""The gateway streams: a 200 MB download through it, hashed and archived on the way,
grows the gateway process's peak memory by far less than the body (no Docker).

The gateway runs alone in a child process, so its VmHWM (peak resident set) measures
the gateway and nothing else; the upstream and the client are in the test process."""

from __future__ import annotations

import hashlib
import http.client
import subprocess
import sys
from pathlib import Path

from impyard.gateway.provenance.receipts import RECEIPT_HEADER, read_receipts
from impyard.home import Home
from tests.helpers.gateway import via_proxy
from tests.helpers.gateway_child import RUN_ID
from tests.helpers.upstream import Upstream, entity_sha256

REPO = Path(__file__).resolve().parents[2]
SIZE = 200 * 1000 * 1000
MAX_GROWTH_KB = 50 * 1024


def test_a_200_mb_download_streams_through_the_gateway(tmp_path: Path, upstream: Upstream) -> None:
    root = tmp_path / "home"
    command = [sys.executable, "-m", "tests.helpers.gateway_child", str(root), str(upstream.port)]
    with subprocess.Popen(
        command, cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as child:
        assert child.stdin is not None and child.stdout is not None
        stdin, stdout = child.stdin, child.stdout

        def memory() -> int:
            stdin.write("memory\n")
            stdin.flush()
            return int(stdout.readline().split()[0])

        try:
            port = int(stdout.readline())
            # Warm up: every code path of a relayed, hashed, archived response runs once.
            assert via_proxy(port, "GET", upstream.url("/gen/300000?chunked=1"))[0] == 200
            before = memory()
            path = f"/gen/{SIZE}?chunked=1"
            receipt_id, received, sha = download(port, upstream.url(path))
            growth = memory() - before
        finally:
            stdin.write("close\n")
            stdin.close()
            child.wait(30)

    print(f"gateway peak RSS growth over a {SIZE} byte download: {growth} kB")
    assert received == SIZE
    assert growth < MAX_GROWTH_KB
    receipt = read_receipts(Home(root).run_receipts(RUN_ID))[receipt_id]
    assert receipt.sha256 == sha == entity_sha256(path) and receipt.bytes == SIZE
    assert receipt.archived is True
    stored = Home(root).archive_dir / "sha256" / sha[:2] / sha[2:]
    assert stored.stat().st_size == SIZE
    stored.unlink()  # 200 MB need not outlive the test


def download(port: int, url: str) -> tuple[str, int, str]:
    """Fetch ``url`` through the gateway a piece at a time: receipt id, size, SHA-256."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    digest = hashlib.sha256()
    received = 0
    try:
        conn.request("GET", url)
        response = conn.getresponse()
        assert response.status == 200
        while piece := response.read1(1 << 20):
            digest.update(piece)
            received += len(piece)
        return response.headers[RECEIPT_HEADER], received, digest.hexdigest()
    finally:
        conn.close()
