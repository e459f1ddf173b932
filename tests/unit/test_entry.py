"""The console entry point: the collector is off while a command starts, back on (with the
start-up objects frozen) for one that keeps running."""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator

import pytest

from impyard.cli import entry


@pytest.fixture
def collector_restored() -> Iterator[None]:
    yield
    gc.unfreeze()
    gc.enable()
    gc.set_threshold(700, 10, 10)


@pytest.mark.usefixtures("collector_restored")
def test_the_collector_comes_back_frozen_for_a_command_that_keeps_running() -> None:
    timer = entry.defer_collector(0.05)
    assert not gc.isenabled()
    assert timer.daemon, "a command that ends sooner never waits for it"
    timer.join(5)
    deadline = time.monotonic() + 5
    while not gc.isenabled() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert gc.isenabled()
    assert gc.get_freeze_count() > 0, "start-up objects are frozen, not traversed again"
    assert gc.get_threshold()[0] == 10_000
