"""serve stops within its shutdown grace on SIGTERM, whatever answers at the engine's
address: a web server, or a listener that never answers. SIGTERM comes at seeded random
moments to a serve whose main thread is preempted where a loaded machine preempts it
(``tests.helpers.stopping``). No engine is needed."""

from __future__ import annotations

from pathlib import Path

import pytest

from impyard.home import Home
from impyard.serve.record import read_records
from tests.helpers.cli import Cli
from tests.helpers.fake_engines import Kind, fake_engine
from tests.helpers.stopping import assert_stopped_cleanly, moments, stop_serve_at

#: The grace serve is given here: no box runs, so it has nothing to wait for.
GRACE_SECONDS = 10.0


@pytest.mark.timeout(90)
@pytest.mark.parametrize("kind", ["200-html", "404-html", "silent"])
def test_serve_exits_within_its_grace_of_sigterm_whatever_the_engine_answers(
    kind: Kind, tmp_path: Path
) -> None:
    cli = Cli(home=tmp_path / "home")
    assert cli("init").code == 0
    assert cli("imp", "create", "yuko").code == 0
    assert cli("task", "add", "yuko", "--prompt", "p").code == 0  # serve asks the engine
    # Lines: the start line, then "engine unreachable" (a silent address holds the ping).
    with fake_engine(kind, tmp_path) as url:
        for moment in moments(kind, 6, most_lines=1 if kind == "silent" else 2):
            stopped = stop_serve_at(
                cli.home, moment, GRACE_SECONDS, "--once", env={"DOCKER_HOST": url}
            )
            assert_stopped_cleanly(stopped, moment)
            assert read_records(Home(cli.home)) == []  # its record went with it
    (task,) = [line for line in cli("task", "list").stdout.splitlines() if "yuko" in line]
    assert "queued" in task  # never claimed: the engine never answered
