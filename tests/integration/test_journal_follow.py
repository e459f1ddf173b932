"""`impyard journal -f --json` read by a script while a real run proceeds in its box."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from tests.helpers.cli import Cli
from tests.helpers.follow import Follower, impyard_command, impyard_env

pytestmark = pytest.mark.docker

# The box sleeps before it writes its note: the run is still going when box.started is out.
SLOW_NOTE = (
    'sleep 4; printf "body\\n" | impyard-note vendors acme-sso --source https://example.com/report'
)


@pytest.mark.one_runtime
def test_a_follower_reads_a_runs_events_as_they_happen(cli: Cli) -> None:
    assert cli("init").code == 0
    created = cli("imp", "create", "yuko")
    assert created.code == 0, created.stderr
    command = impyard_command(cli.home, "run", "yuko", "--prompt", "p", "--json")
    with Follower(cli.home, "journal", "-f", "--json", "--imp", "yuko") as follower:
        run = subprocess.Popen(
            [*command, "--command", SLOW_NOTE],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=impyard_env(),
        )
        seen: list[dict[str, Any]] = []
        try:
            while not any(e["event"] == "box.started" for e in seen):
                seen.append(json.loads(follower.line(timeout=60)))  # each line parses alone
            running_at_box_started = run.poll() is None
            while not any(e["event"] == "knowledge.integrated" for e in seen):
                seen.append(json.loads(follower.line(timeout=60)))
        finally:
            out, err = run.communicate(timeout=120)
        assert run.returncode == 0, err
        assert running_at_box_started
        record = json.loads(out)
        ours = [e["event"] for e in seen if e.get("run") == record["run_id"]]
        assert ours[0] == "run.created"
        assert ours.index("box.started") < ours.index("box.exited")
        assert ours.index("box.exited") < ours.index("knowledge.integrated")
        code, err = follower.stop()
    assert code == 0 and err == ""
