"""One ``impyard serve`` per data root: the first holds the queue, a second is refused in
one line naming the first, and a serve that died blocks nothing. No engine is needed:
the serves wait for one that never comes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from impyard.home import Home
from impyard.serve.record import read_records
from tests.helpers.cli import Cli
from tests.helpers.git import GIT_ENV

NO_ENGINE = {"DOCKER_HOST": "tcp://127.0.0.1:9"}


@pytest.fixture
def yard(tmp_path: Path) -> Cli:
    cli = Cli(home=tmp_path / "home", in_process=False)
    assert cli("init").code == 0
    assert cli("imp", "create", "yuko").code == 0
    assert cli("task", "add", "yuko", "--prompt", "p").code == 0  # serve waits to claim it
    return cli


def spawn_serve(cli: Cli) -> subprocess.Popen[str]:
    env = {**os.environ, **GIT_ENV, **NO_ENGINE}
    env.pop("IMPYARD_HOME", None)
    return subprocess.Popen(
        [sys.executable, "-m", "impyard", "--home", str(cli.home), "serve", "--once"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


@pytest.fixture
def first(yard: Cli) -> Iterator[subprocess.Popen[str]]:
    """A serve that is up (it printed its start line) and waits for the engine."""
    serve = spawn_serve(yard)
    try:
        assert serve.stdout is not None
        assert "impyard serve: data root " in serve.stdout.readline()
        yield serve
    finally:
        if serve.poll() is None:
            serve.send_signal(signal.SIGTERM)
        serve.communicate(timeout=30)


def test_a_second_serve_is_refused_naming_the_first_and_a_dead_one_blocks_nothing(
    yard: Cli, first: subprocess.Popen[str]
) -> None:
    second = yard("serve", "--once", env=NO_ENGINE, timeout=30)
    assert second.code == 1
    assert second.stdout == ""  # it did nothing: no start line, no recovery, no claim
    assert second.stderr.count("\n") == 1 and "Traceback" not in second.stderr
    assert second.stderr.startswith(
        f"impyard: error: another impyard serve (pid {first.pid}) is running on the data "
        f"root {yard.home} and holds its queue"
    ), second.stderr
    assert [(r.pid, r.alive) for r in read_records(Home(yard.home))] == [(first.pid, True)]
    assert first.poll() is None  # the first serves on

    first.send_signal(signal.SIGKILL)  # its lock file and its record are left behind
    first.communicate(timeout=30)
    for ended_by in ("SIGKILL", "SIGTERM"):  # how the serve before this one ended
        serve = spawn_serve(yard)
        assert serve.stdout is not None
        started = serve.stdout.readline()
        serve.send_signal(signal.SIGTERM)
        _out, err = serve.communicate(timeout=30)
        assert "impyard serve: data root " in started, (ended_by, started, err)
        assert serve.returncode == 0, (ended_by, err)
