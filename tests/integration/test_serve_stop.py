"""serve against the real engine, with one-note tasks queued and running, stops within
its shutdown grace on SIGTERM at seeded random moments, its main thread preempted where a
loaded machine preempts it (``tests.helpers.stopping``), and leaves no box behind."""

from __future__ import annotations

import json

import pytest

from impyard.home import Home
from impyard.serve.record import read_records
from tests.helpers.cli import Cli
from tests.helpers.stopping import assert_stopped_cleanly, boxes_of, moments, stop_serve_at

pytestmark = pytest.mark.docker

#: Longer than a one-note box takes even on a loaded machine: every box ends on its own.
GRACE_SECONDS = 20.0
TASKS_PER_MOMENT = 1


@pytest.mark.timeout(240)
def test_serve_with_running_boxes_exits_within_its_grace_of_sigterm(cli: Cli) -> None:
    assert cli("init").code == 0
    assert cli("imp", "create", "yuko").code == 0
    # Lines: the start line, then a box's start and its outcome for each task; then serve
    # waits for more.
    for n, moment in enumerate(moments("real engine", 8, most_lines=1 + 2 * TASKS_PER_MOMENT)):
        for i in range(TASKS_PER_MOMENT):
            assert cli("task", "add", "yuko", "--prompt", f"fact {n}.{i}").code == 0
        stopped = stop_serve_at(cli.home, moment, GRACE_SECONDS, "--concurrency", "2")
        assert_stopped_cleanly(stopped, moment)
        assert boxes_of(cli.home) == [], str(moment)
        assert read_records(Home(cli.home)) == []
        states = {t["state"] for t in json.loads(cli("task", "list", "--json").stdout)}
        assert "running" not in states, (str(moment), states)  # each claimed task ended
