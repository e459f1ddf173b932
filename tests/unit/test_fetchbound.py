"""The watch on a pack as libgit2's indexer writes it: through mmap, its file grown a page
ahead of the data with zeros, every entry it took written whole."""

from __future__ import annotations

import mmap
import os
import zlib
from pathlib import Path

import pytest

from impyard.backup.fetchbound import PackWatch, TooLarge
from tests.helpers.bombs import entry_header, write_pack

PAGE = max(mmap.PAGESIZE, mmap.ALLOCATIONGRANULARITY)


def pack_of(tmp_path: Path, entries: list[bytes]) -> tuple[bytes, list[int]]:
    """A pack of ``entries`` and where each ends."""
    git_dir = tmp_path / "repo.git"
    (git_dir / "objects" / "pack").mkdir(parents=True)
    write_pack(git_dir, [(bytes([n]) * 20, raw) for n, raw in enumerate(entries)])
    [pack] = (git_dir / "objects" / "pack").glob("*.pack")
    ends, at = [], 12
    for raw in entries:
        at += len(raw)
        ends.append(at)
    return pack.read_bytes(), ends


def blob(data: bytes, declared: int | None = None) -> bytes:
    return entry_header(3, len(data) if declared is None else declared) + zlib.compress(data)


def receive(tmp_path: Path, pack: bytes, ends: list[int], bound: int, step: int = 1000) -> int:
    """Write ``pack`` as the indexer does, ``step`` bytes at a time, following it after each
    write; how many entries were taken whole when the watch refused (or all of them)."""
    receiving = tmp_path / "receiving"
    receiving.mkdir()
    target = receiving / "pack_git2_a1b2c3"
    watch = PackWatch(receiving, bound)
    try:
        with target.open("wb") as out:
            for written in range(step, len(pack) + step, step):
                written = min(written, len(pack))
                out.seek(0)
                out.write(pack[:written])
                out.truncate((written // PAGE + 1) * PAGE)  # a page ahead, zeros
                out.flush()
                taken = sum(1 for end in ends if end <= written)
                try:
                    watch.follow(taken)
                except TooLarge:
                    return taken
    finally:
        watch.close()
    return len(ends)


def test_a_pack_within_the_bound_is_followed_to_its_end(tmp_path: Path) -> None:
    text = os.urandom(10_240)  # entries cross pages and the zero padding
    entries = [blob(text[:n]) for n in (0, 1, 300, 5000, 10_240)] * 3
    pack, ends = pack_of(tmp_path, entries)
    assert receive(tmp_path, pack, ends, bound=10_240, step=777) == len(entries)


def test_an_entry_over_the_bound_is_refused_before_it_is_taken(tmp_path: Path) -> None:
    entries = [blob(b"small"), blob(os.urandom(5 * PAGE)), blob(b"after")]
    pack, ends = pack_of(tmp_path, entries)
    # Its header is surely written once the file is a page past it: refused then.
    assert receive(tmp_path, pack, ends, bound=4 * PAGE) == 1


@pytest.mark.parametrize("declared", [10, 0])
def test_an_entry_inflating_past_what_it_declares_is_refused(tmp_path: Path, declared: int) -> None:
    entries = [blob(b"x" * 100, declared=declared)]
    pack, _ = pack_of(tmp_path, entries)
    with pytest.raises(TooLarge, match=r"pack entry 1 of 1: object-too-large: inflates past"):
        receiving = tmp_path / "r"
        receiving.mkdir()
        (receiving / "pack_git2_x").write_bytes(pack)
        watch = PackWatch(receiving, bound=1000)
        try:
            watch.follow(1)
        finally:
            watch.close()
