"""Naming /tmp as the cause of an OOM kill: reading the box's cgroup and the reason."""

from __future__ import annotations

import os
from pathlib import Path

from impyard.box.watch.tmpwatch import TmpUsage, TmpWatch, memory_stat_path, oom_reason, read_shmem

GIB = 2**30


def test_memory_stat_path_is_found_under_the_cgroup_root(tmp_path: Path) -> None:
    own = memory_stat_path(os.getpid(), root=tmp_path)
    assert own is not None and own.name == "memory.stat" and own.is_relative_to(tmp_path)
    assert memory_stat_path(2**22 + 7, root=tmp_path) is None  # no such process


def test_read_shmem_takes_the_shmem_line_only(tmp_path: Path) -> None:
    stat = tmp_path / "memory.stat"
    stat.write_text("cache 53547008\nrss 49152\nshmem 52428800\ntotal_shmem 99\n")
    assert read_shmem(stat) == 52428800
    stat.write_text("cache 1\n")
    assert read_shmem(stat) is None
    assert read_shmem(tmp_path / "gone") is None


def test_a_watch_without_a_readable_cgroup_reports_nothing() -> None:
    watch = TmpWatch(interval=0.01)
    watch.start(2**22 + 7)
    assert watch.stop() is None


def test_oom_reason_blames_tmp_only_when_it_held_most_of_the_limit() -> None:
    blamed = oom_reason(GIB, TmpUsage(last_bytes=900 * 2**20, peak_bytes=1000 * 2**20))
    assert blamed.startswith("killed by the out-of-memory killer: files in /tmp held 0.98 GiB")
    assert "count against box.memory_bytes" in blamed
    not_tmp = oom_reason(GIB, TmpUsage(last_bytes=2**20, peak_bytes=2**20))
    assert (
        not_tmp == "killed by the out-of-memory killer (memory limit 1.00 GiB; /tmp held 0.00 GiB)"
    )
    assert oom_reason(GIB, None) == "killed by the out-of-memory killer (memory limit 1.00 GiB)"


def test_under_gvisor_an_oom_reports_the_whole_box_and_does_not_blame_tmp() -> None:
    """gVisor's tmpfs is the sandbox's memory: the cgroup's shmem is the whole box."""
    usage = TmpUsage(last_bytes=2**30, peak_bytes=2**30)
    reason = oom_reason(2**30, usage, runtime="runsc")
    assert reason.startswith("killed by the out-of-memory killer: the box held 1.00 GiB of")
    assert "files in /tmp held" not in reason
    assert "under gVisor /tmp's files and the processes' memory are one figure" in reason
