"""The opt-in source archive (no Docker): bodies stored once by SHA-256 while they are
relayed, each limit honoured with the receipt saying which, ``impyard archive show``,
and pruning by age."""

from __future__ import annotations

import hashlib
import http.client
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from impyard.gateway.provenance.archive import Archive
from impyard.gateway.provenance.archive_intake import RunArchive
from impyard.gateway.provenance.receipts import RECEIPT_HEADER, Receipt, read_receipts
from impyard.home import Home
from impyard.policy.models import GatewayArchive
from tests.helpers.cli import Cli
from tests.helpers.gateway import RUN_ID, Served, serve_on_loopback, via_proxy
from tests.helpers.upstream import Upstream, entity

OTHER_RUN = "run-20260711T130000Z-abcdefabcd"


def archiving(tmp_path: Path, upstream: Upstream, run_id: str = RUN_ID, **limits: Any) -> Served:
    return serve_on_loopback(tmp_path, upstream, run_id=run_id, archive={"enabled": True, **limits})


@pytest.fixture
def served(tmp_path: Path, upstream: Upstream) -> Iterator[Served]:
    s = archiving(tmp_path, upstream)
    yield s
    s.gateway.close()


def fetch(s: Served, upstream: Upstream, path: str) -> str:
    status, headers, body = via_proxy(s.port, "GET", upstream.url(path))
    assert status == 200 and body == entity(path)  # archived or not, the box gets it all
    return headers[RECEIPT_HEADER]


def receipts(s: Served, run_id: str = RUN_ID) -> dict[str, Receipt]:
    s.gateway.close()
    return read_receipts(s.home.run_receipts(run_id))


def stored_objects(home: Home) -> dict[str, bytes]:
    root = home.archive_dir / "sha256"
    if not root.is_dir():
        return {}
    return {
        f"{fan.name}{obj.name}": obj.read_bytes() for fan in root.iterdir() for obj in fan.iterdir()
    }


def leftover_temps(home: Home) -> list[Path]:
    tmp = home.archive_dir / "tmp"
    return list(tmp.iterdir()) if tmp.is_dir() else []


def test_identical_downloads_are_stored_once(served: Served, upstream: Upstream) -> None:
    # The same entity three ways: chunking is undone, so all three are one object.
    ids = [fetch(served, upstream, p) for p in ("/gen/70000", "/gen/70000?chunked=1")]
    ids.append(fetch(served, upstream, "/gen/70000?close=1"))
    zipped = fetch(served, upstream, "/gen/70000?gzip=1")
    found = receipts(served)
    sha = hashlib.sha256(entity("/gen/70000")).hexdigest()
    assert [found[i].sha256 for i in ids] == [sha] * 3
    assert all(found[i].archived is True and found[i].archive_note is None for i in ids)
    zipped_body = entity("/gen/70000?gzip=1")
    objects = stored_objects(served.home)
    assert objects == {sha: entity("/gen/70000"), found[zipped].sha256: zipped_body}
    assert (served.home.archive_dir / "sha256" / sha[:2] / sha[2:]).is_file()
    assert Archive(served.home.archive_dir).total_bytes() == 70000 + len(zipped_body)
    # The run is charged for what the archive grew by, not for the duplicates.
    assert served.gateway.archive is not None
    assert served.gateway.archive.stored_bytes == 70000 + len(zipped_body)
    assert leftover_temps(served.home) == []


def test_a_body_over_max_object_bytes_is_relayed_but_not_stored(
    tmp_path: Path, upstream: Upstream
) -> None:
    s = archiving(tmp_path, upstream, max_object_bytes=1000)
    announced = fetch(s, upstream, "/gen/5000")  # refused by its Content-Length
    streamed = fetch(s, upstream, "/gen/5000?chunked=1")  # refused once past the limit
    small = fetch(s, upstream, "/gen/1000")
    found = receipts(s)
    for receipt_id in (announced, streamed):
        assert found[receipt_id].archived is False and found[receipt_id].bytes == 5000
        assert "gateway.archive.max_object_bytes" in (found[receipt_id].archive_note or "")
    assert found[small].archived is True
    assert list(stored_objects(s.home)) == [found[small].sha256]
    assert leftover_temps(s.home) == []


def test_a_run_stores_at_most_max_bytes_per_run_new_bytes(
    tmp_path: Path, upstream: Upstream
) -> None:
    s = archiving(tmp_path, upstream, max_bytes_per_run=15000)
    first = fetch(s, upstream, "/gen/10000")
    over = fetch(s, upstream, "/gen/10001?chunked=1")
    again = fetch(s, upstream, "/gen/10000")  # already stored: costs the run nothing
    fits = fetch(s, upstream, "/gen/5000?gzip=1")
    found = receipts(s)
    assert found[first].archived and found[again].archived and found[fits].archived
    assert found[over].archived is False
    assert "gateway.archive.max_bytes_per_run" in (found[over].archive_note or "")
    assert s.gateway.archive is not None
    assert s.gateway.archive.stored_bytes == 10000 + found[fits].bytes <= 15000
    # Another run has its own allowance in the same archive.
    other = archiving(tmp_path, upstream, run_id=OTHER_RUN, max_bytes_per_run=15000)
    later = fetch(other, upstream, "/gen/10001")
    assert receipts(other, OTHER_RUN)[later].archived is True


def test_the_archive_stops_at_max_total_bytes_across_runs(
    tmp_path: Path, upstream: Upstream
) -> None:
    first = archiving(tmp_path, upstream, max_total_bytes=15000)
    stored = fetch(first, upstream, "/gen/10000")
    assert receipts(first)[stored].archived is True
    second = archiving(tmp_path, upstream, run_id=OTHER_RUN, max_total_bytes=15000)
    announced = fetch(second, upstream, "/gen/6000")
    streamed = fetch(second, upstream, "/gen/6000?close=1")
    fits = fetch(second, upstream, "/gen/5000")
    found = receipts(second, OTHER_RUN)
    for receipt_id in (announced, streamed):
        assert found[receipt_id].archived is False
        assert "gateway.archive.max_total_bytes" in (found[receipt_id].archive_note or "")
    assert found[fits].archived is True
    assert Archive(second.home.archive_dir).total_bytes() == 15000
    assert second.gateway.archive is not None and second.gateway.archive.stored_bytes == 5000
    assert leftover_temps(second.home) == []


def test_a_cut_body_is_not_archived(tmp_path: Path, upstream: Upstream) -> None:
    s = serve_on_loopback(
        tmp_path,
        upstream,
        archive={"enabled": True},
        budget={"response_bytes_per_run": 100_000},
    )
    # The box sees a cut body: the connection ends mid-chunk.
    with pytest.raises(http.client.IncompleteRead):
        via_proxy(s.port, "GET", upstream.url("/gen/1000000?chunked=1"))
    [receipt] = receipts(s).values()
    assert not receipt.complete and receipt.archived is False
    assert receipt.archive_note == "body incomplete"
    assert stored_objects(s.home) == {} and leftover_temps(s.home) == []


def test_bodiless_responses_say_so(served: Served, upstream: Upstream) -> None:
    status, headers, _ = via_proxy(served.port, "HEAD", upstream.url("/gen/10"))
    assert status == 200
    receipt = receipts(served)[headers[RECEIPT_HEADER]]
    assert receipt.archived is False and receipt.archive_note == "no body"


def test_a_missing_or_torn_total_is_recounted(tmp_path: Path) -> None:
    archive = Archive(tmp_path / "archive")
    run = RunArchive(archive, GatewayArchive(enabled=True))
    for body in (b"one", b"three"):
        writer = run.body(None)
        writer.write(body)
        assert writer.finish(hashlib.sha256(body).hexdigest(), complete=True).archived
    assert archive.total_bytes() == 8
    archive.total_file.unlink()
    assert archive.total_bytes() == 8
    archive.total_file.write_text("12")  # torn by a crash mid-write: too low or garbage
    archive.total_file.write_text("1\x00")
    assert archive.total_bytes() == 8


def test_prune_deletes_objects_older_than_the_retention(tmp_path: Path) -> None:
    archive = Archive(tmp_path / "archive")
    run = RunArchive(archive, GatewayArchive(enabled=True))
    now = time.time()
    shas = {}
    for name, age_days in (("old", 100), ("recent", 10), ("refreshed", 100)):
        body = name.encode() * 10
        writer = run.body(len(body))
        writer.write(body)
        sha = hashlib.sha256(body).hexdigest()
        assert writer.finish(sha, complete=True).archived
        os.utime(archive.object_path(sha), (now - age_days * 86400,) * 2)
        shas[name] = sha
    # Fetched again: the duplicate refreshes the object's age instead of storing it twice.
    writer = run.body(None)
    writer.write(b"refreshed" * 10)
    assert writer.finish(shas["refreshed"], complete=True).archived
    stale_temp, _ = archive.new_temp()
    stale_temp.close()
    stale = next(archive.tmp_dir.iterdir())
    os.utime(stale, (now - 2 * 86400,) * 2)

    report = archive.prune(90, now=now)

    assert (report.removed, report.removed_bytes) == (1, 30)
    assert (report.kept, report.kept_bytes) == (2, 60 + 90)
    assert not archive.object_path(shas["old"]).exists()
    assert archive.object_path(shas["recent"]).exists()
    assert archive.object_path(shas["refreshed"]).exists()
    assert not (archive.objects_dir / shas["old"][:2]).exists() or any(
        (archive.objects_dir / shas["old"][:2]).iterdir()
    )
    assert not stale.exists()
    assert archive.total_bytes() == 150


def test_archive_show_streams_the_stored_body(cli: Cli, tmp_path: Path, upstream: Upstream) -> None:
    assert cli("init").code == 0
    s = archiving(tmp_path, upstream)
    text_id = fetch(s, upstream, "/hello")  # the upstream's short text answer
    binary_id = fetch(s, upstream, "/gen/3000000?gzip=1")
    found = receipts(s)
    shown = cli("archive", "show", found[text_id].sha256)
    assert shown.code == 0 and shown.stdout == "hello from upstream GET /hello\n"
    # Binary, byte for byte, through the real console command (gzip stays gzip).
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "impyard",
            "--home",
            str(cli.home),
            "archive",
            "show",
            found[binary_id].sha256.upper(),
        ],
        capture_output=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == entity("/gen/3000000?gzip=1")


def test_archive_show_of_a_bad_or_absent_digest_is_a_one_line_error(cli: Cli) -> None:
    assert cli("init").code == 0
    bad = cli("archive", "show", "not-a-digest")
    assert bad.code == 2 and "is not a SHA-256" in bad.stderr
    absent = cli("archive", "show", "ab" * 32)
    assert absent.code == 2 and f"no archived body {'ab' * 32}" in absent.stderr
    for result in (bad, absent):
        assert "Traceback" not in result.stderr and result.stdout == ""
        assert len(result.stderr.strip().splitlines()) == 1
