"""A task that could not run is ``failed`` with its reason, shown by ``task list`` and
``task show``; ``task retry`` queues it again, and refuses any other state by name."""

from __future__ import annotations

import json

import pytest

from impyard.queue import tasks
from impyard.queue.db import opened, transaction
from tests.helpers.cli import Cli

REASON = "refusing to run imp 'yuko': route 'llm': IMPYARD_SECRET_LLM is not set on the host"


@pytest.fixture
def failed(cli: Cli) -> str:
    """A task serve claimed and ended without a run, as its loop writes one."""
    assert cli("init").code == 0
    assert cli("imp", "create", "yuko").code == 0
    task_id = cli("task", "add", "yuko", "--prompt", "find vendors").stdout.strip()
    with opened(cli.home / "impyard.db") as conn, transaction(conn):
        tasks.claim(conn, 1, set())
        tasks.record_endings(conn, [tasks.Ending(task_id, error=REASON)])
    return task_id


def test_a_failed_task_shows_its_state_and_reason(cli: Cli, failed: str) -> None:
    listed = cli("task", "list").stdout.splitlines()
    assert listed[0].split()[:6] == ["task", "imp", "state", "mode", "checkpoint", "reason"]
    assert listed[1].split()[:4] == [failed, "yuko", "failed", "append"]
    assert REASON in listed[1]
    (row,) = json.loads(cli("task", "list", "--state", "failed", "--json").stdout)
    assert (row["id"], row["state"], row["error"]) == (failed, "failed", REASON)
    shown = cli("task", "show", failed).stdout.splitlines()
    assert "state       failed" in shown and f"reason      {REASON}" in shown
    document = json.loads(cli("task", "show", failed, "--json").stdout)
    assert (document["state"], document["error"]) == ("failed", REASON)


def test_retry_queues_a_failed_task_again_and_refuses_others(cli: Cli, failed: str) -> None:
    retried = cli("task", "retry", failed)
    assert retried.code == 0, retried.stderr
    assert retried.stdout.startswith(f"queued {failed} again (it failed: refusing to run")
    document = json.loads(cli("task", "show", failed, "--json").stdout)
    assert (document["state"], document["error"], document["started_at"]) == (
        "queued",
        None,
        None,
    )
    again = cli("task", "retry", failed)
    assert again.code != 0
    assert again.stderr == (
        f"impyard: error: task {failed} is queued; only a failed task can be retried\n"
    )
    unknown = cli("task", "retry", "task-000000000000")
    assert unknown.code != 0 and "no task 'task-000000000000'" in unknown.stderr
    (event,) = [
        json.loads(line)
        for line in (cli.home / "journal.jsonl").read_text().splitlines()
        if '"task.retried"' in line
    ]
    assert (event["task"], event["error"]) == (failed, REASON)
