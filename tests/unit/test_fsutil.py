"""Atomic replacement of a file, from many threads of one process at once."""

from __future__ import annotations

import threading
from pathlib import Path

from impyard.common.fsutil import atomic_write_text


def test_threads_replacing_the_same_file_never_trip_over_each_other(tmp_path: Path) -> None:
    """Serve's concurrent runs share caches (an image's CA roots, engine features): each
    write must land whole, none may fail because another moved its temporary file."""
    target = tmp_path / "shared.pem"
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def write(n: int) -> None:
        start.wait()
        try:
            for _ in range(50):
                atomic_write_text(target, f"writer {n}\n" * 100)
        except BaseException as exc:  # reported below, with the thread's name
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    lines = set(target.read_text().splitlines())
    assert len(lines) == 1 and lines.pop().startswith("writer ")
    assert [p.name for p in tmp_path.iterdir()] == ["shared.pem"]  # no temporary left
