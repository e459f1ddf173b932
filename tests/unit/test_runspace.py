"""Disk-space admission: what running runs' spaces are still promised."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from impyard.home import Home, init_home
from impyard.knowledge import runspace


def test_a_space_unmounted_since_mountinfo_was_read_is_not_promised_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run released between reading mountinfo and asking its free space leaves a plain
    directory: its statvfs is the data root's own free space, which must not count."""
    home = Home(tmp_path / "home")
    init_home(home)
    gone = home.run_space("run-20260711T120000Z-0123456789")
    gone.mkdir(parents=True)
    monkeypatch.setattr(runspace, "mounted_spaces", lambda _home: [gone])
    assert runspace.committed_bytes(home) == 0
    runspace.admit(home, 1, 0)  # and admission is not refused for it


def test_a_space_released_entirely_is_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = Home(tmp_path / "home")
    init_home(home)
    monkeypatch.setattr(runspace, "mounted_spaces", lambda _home: [tmp_path / "nowhere"])
    assert runspace.committed_bytes(home) == 0


def test_an_admitted_space_counts_until_it_is_mounted(tmp_path: Path) -> None:
    """Spaces are formatted and mounted outside the admission lock: until then their
    reservation holds their size, so a second run cannot be promised the same room."""
    home = Home(tmp_path / "home")
    init_home(home)
    free = shutil.disk_usage(home.runs_dir).free
    half = free // 2 + 2**20
    runspace.admit(home, half, 0)
    runspace.reserve(home, "run-20260711T120000Z-0123456789", half)
    with pytest.raises(runspace.DiskSpaceError, match="promised to running runs"):
        runspace.admit(home, half, 0)
    runspace.unreserve(home, "run-20260711T120000Z-0123456789")
    runspace.admit(home, half, 0)


def test_a_reservation_left_by_a_dead_process_stops_counting(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    init_home(home)
    runspace.reserve(home, "run-20260711T120000Z-0123456789", 10**15)
    assert runspace.reserved_bytes(home) == 10**15
    stale = runspace.reservations_dir(home) / "run-20260711T120000Z-0123456789"
    old = stale.stat().st_mtime - runspace.RESERVATION_SECONDS - 1
    os.utime(stale, (old, old))
    assert runspace.reserved_bytes(home) == 0
    runspace.admit(home, 1, 0)
