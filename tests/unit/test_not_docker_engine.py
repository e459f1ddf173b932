"""``DOCKER_HOST`` naming an HTTP server that is not a Docker engine: a web server's 404
page, or a 200 HTML page for every path. No engine is needed; the servers
(``tests.helpers.fake_engines``) are the point. The client says once, typed, that the
address does not answer as a Docker engine, and ``status``, ``run`` and ``serve`` each
say so in one line."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from impyard.box.docker.engine import EngineNotDockerError, EngineUnreachableError, call
from impyard.box.docker.engineapi import EngineAPI
from impyard.box.docker.enginehttp import Transport
from tests.helpers.cli import Cli
from tests.helpers.fake_engines import fake_engine
from tests.helpers.git import GIT_ENV

NOT_DOCKER = "does not answer as a Docker engine"


@pytest.fixture(params=["404-html", "200-html"])
def not_docker(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The ``DOCKER_HOST`` of an HTTP server that is not a Docker engine."""
    with fake_engine(request.param, tmp_path) as url:
        yield url


@pytest.fixture
def yard(tmp_path: Path) -> Cli:
    cli = Cli(home=tmp_path / "home", in_process=False)
    assert cli("init").code == 0
    assert cli("imp", "create", "yuko").code == 0
    return cli


def test_the_client_says_the_address_is_not_a_docker_engine(not_docker: str) -> None:
    api = EngineAPI(Transport(not_docker, "1.41", 5))
    try:
        for what, fn in (("version", api.version), ("ping", api.ping)):
            with pytest.raises(EngineNotDockerError) as raised:
                call(what, fn)
            assert isinstance(raised.value, EngineUnreachableError)  # callers wait or refuse
            message = str(raised.value)
            assert message.startswith(f"the address {not_docker} {NOT_DOCKER} ({what}: HTTP ")
            assert "text/html" in message and "\n" not in message
        with pytest.raises(EngineNotDockerError, match="/containers/c1/json"):
            call("inspect", api.inspect_container, "c1", container_id="c1")
    finally:
        api.close()


def test_status_shows_one_engine_problem_on_its_full_screen(yard: Cli, not_docker: str) -> None:
    result = yard("status", env={"DOCKER_HOST": not_docker})
    assert result.code == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stdout.splitlines()
    for label in ("engine", "images", "serve", "queue", "runs", "leases", "knowledge"):
        assert any(line.startswith(label + " ") for line in lines), (label, lines)
    [engine] = [line for line in lines if line.startswith("engine ")]
    assert NOT_DOCKER in engine and not_docker in engine
    engine_problems = [line for line in lines if line.startswith("PROBLEM  engine")]
    assert len(engine_problems) == 1 and NOT_DOCKER in engine_problems[0]
    assert "impyard-box:latest unknown" in result.stdout  # not claimed missing


def test_run_says_in_one_line_that_the_address_is_not_a_docker_engine(
    yard: Cli, not_docker: str
) -> None:
    result = yard("run", "yuko", "--prompt", "p", env={"DOCKER_HOST": not_docker})
    assert result.code == 1, result.stdout + result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert result.stderr.startswith(f"impyard: error: the address {not_docker} {NOT_DOCKER}")
    assert not list((yard.home / "runs").glob("run-*"))  # nothing started


@pytest.mark.timeout(60)
def test_serve_says_in_one_line_that_the_address_is_not_a_docker_engine(
    yard: Cli, not_docker: str
) -> None:
    assert yard("task", "add", "yuko", "--prompt", "p").code == 0
    env = {**os.environ, **GIT_ENV, "DOCKER_HOST": not_docker}
    env.pop("IMPYARD_HOME", None)
    serve = subprocess.Popen(
        [sys.executable, "-m", "impyard", "--home", str(yard.home), "serve", "--once"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert serve.stdout is not None
        serve.stdout.readline()  # the start line names the engine's state too
        first = serve.stdout.readline()  # serve waits for an engine; it says why, once
    finally:
        serve.send_signal(signal.SIGTERM)
        out, err = serve.communicate(timeout=30)
    assert "engine unreachable, waiting: " in first
    assert f"the address {not_docker} {NOT_DOCKER}" in first
    assert "Traceback" not in err and NOT_DOCKER not in out  # said once
