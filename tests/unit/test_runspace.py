"""Disk-space admission: what running runs' spaces are still promised."""

from __future__ import annotations

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
