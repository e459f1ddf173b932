"""serve's malloc settings apply on glibc and trimming is harmless; garbage that only the
collector frees goes soon after runs end, at most once per interval."""

from __future__ import annotations

import gc
import platform
import weakref

import pytest

from impyard.serve import heap


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_configure_and_trim_on_glibc() -> None:
    assert heap.configure() is True
    heap.trim()
    heap.trim()


class _Node:
    def __init__(self) -> None:
        self.me = self


def test_run_garbage_in_a_cycle_is_collected_once_the_interval_has_passed() -> None:
    was_enabled = gc.isenabled()
    gc.disable()  # only the collector under test may find the cycle
    try:
        node = _Node()
        gone = weakref.ref(node)
        del node
        never = heap.CycleCollector(every_seconds=3600)
        assert not never.after_runs_ended()
        assert gone() is not None, "within the interval nothing is collected"
        due = heap.CycleCollector(every_seconds=0)
        assert due.after_runs_ended()
        assert gone() is None
    finally:
        if was_enabled:
            gc.enable()
