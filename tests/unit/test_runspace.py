"""Disk-space admission: what running runs' spaces are still promised."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from impyard.common.loopspace import loop_supported
from impyard.dataroot import init_home
from impyard.home import Home
from impyard.knowledge.checkouts import runspace


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


needs_loop = pytest.mark.skipif(loop_supported() is not None, reason=f"{loop_supported()}")


@needs_loop
def test_a_run_takes_a_spare_of_its_size_and_formats_its_own_without_one(
    tmp_path: Path,
) -> None:
    """The spare formatted beside one run is renamed into the next run of the same size
    (nothing is formatted on its path); a run of another size formats its own."""
    home = Home(tmp_path / "home")
    init_home(home)
    size = runspace.space_size(1 << 20)
    spare = runspace.make_spare(home, size)
    assert spare is not None and spare.is_file()
    assert runspace.make_spare(home, size) is None, "one spare per size is enough"
    space = runspace.create(home, "run-20260711T120000Z-0123456789", size, loop=True)
    try:
        assert not spare.exists(), "the spare became the run's image"
        assert space.image is not None and space.image.is_file()
        (space.mount / "written").write_text("a box's file")
        assert list(runspace.spares_dir(home).iterdir()) == []
        other = runspace.create(home, "run-20260711T120001Z-0123456789", size + 2**20, loop=True)
        try:
            assert (other.mount / "lost+found").is_dir(), "formatted on the spot"
        finally:
            runspace.release(other)
    finally:
        runspace.release(space)


def test_a_half_made_spare_is_never_taken(tmp_path: Path) -> None:
    """A crash mid-format leaves ``.tmp``: no run mounts it, and it does not count as the
    spare of its size."""
    home = Home(tmp_path / "home")
    init_home(home)
    directory = runspace.spares_dir(home)
    directory.mkdir()
    (directory / "1048576.1-2.img.tmp").write_bytes(b"half")
    target = tmp_path / "image"
    assert not runspace._take_spare(home, 1048576, target)
    assert not target.exists()


def _mount_options(point: Path) -> set[str]:
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        if fields[4] == str(point):
            return set(fields[5].split(","))
    raise AssertionError(f"{point} is not mounted")


def _loop_devices_backing(image: Path) -> list[str]:
    found = []
    for backing in Path("/sys/block").glob("loop*/loop/backing_file"):
        if backing.read_text().strip().removesuffix(" (deleted)") == str(image):
            found.append(backing.parent.parent.name)
    return found


@needs_loop
@pytest.mark.parametrize("route", ["ioctl", "tool"])
def test_a_space_mounts_nosuid_nodev_and_its_loop_device_goes_with_the_mount(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, route: str
) -> None:
    """Mounted directly (ioctl + mount(2)) or, where that route is missing, with the
    ``mount`` tool: the same options, one loop device, detached when unmounted."""
    from impyard.knowledge.checkouts import loopmount

    if route == "tool":
        monkeypatch.setattr(loopmount, "LOOP_CONTROL", tmp_path / "no-loop-control")
    else:
        tool = runspace._run

        def no_mount_tool(argv: list[str], what: str) -> None:
            assert argv[0] != "mount", "the direct route fell back to the tool"
            tool(argv, what)

        monkeypatch.setattr(runspace, "_run", no_mount_tool)
    home = Home(tmp_path / "home")
    init_home(home)
    space = runspace.create(home, "run-20260711T120000Z-0123456789", 8 << 20, loop=True)
    try:
        assert space.image is not None
        assert {"rw", "nosuid", "nodev", "noatime"} <= _mount_options(space.mount)
        assert len(_loop_devices_backing(space.image)) == 1
        (space.mount / "written").write_text("a box's file")
        runspace.unmount(space)
        assert _loop_devices_backing(space.image) == []
        assert runspace.mount_read_only(space)
        assert {"ro", "nosuid", "nodev", "noexec"} <= _mount_options(space.mount)
        assert (space.mount / "written").read_text() == "a box's file"
        with pytest.raises(OSError):
            (space.mount / "more").write_text("refused")
    finally:
        runspace.release(space)
    assert _loop_devices_backing(space.image) == []
