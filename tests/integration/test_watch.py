"""Watching runs while they run: `impyard run` streams, `runs logs -f` follows any run,
`run --detach` returns at once. Real CLI processes against the real engine."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from impyard.box.watch.livelog import HEAD_BYTES, SEGMENT_BYTES, TAIL_BYTES, live_dir
from tests.helpers.cli import Cli
from tests.helpers.git import GIT_ENV, git

pytestmark = pytest.mark.docker

TICKS = "for i in 1 2 3; do echo tick $i; sleep 1; done"
NOTE = 'printf "body\\n" | impyard-note vendors acme-sso --source https://example.com/report'
# 40 blocks of 500,000 bytes, each ending in its number: 20 MB, past the 2 MiB head.
FLOOD = (
    'i=0; while [ $i -lt 40 ]; do head -c 500000 /dev/zero | tr "\\0" x; '
    'echo " block $i"; i=$((i+1)); sleep 0.05; done; echo FINAL-LINE'
)


def impyard(cli: Cli, *args: str, **kwargs: Any) -> subprocess.Popen[bytes]:
    env = {**os.environ, **GIT_ENV}
    env.pop("IMPYARD_HOME", None)
    # Unbuffered: a ``readline`` on a buffered pipe may read the next lines too, and
    # ``communicate`` (``finish``) reads the pipe's descriptor, never that buffer: a line
    # printed together with the first was lost to the test, not by Impyard.
    return subprocess.Popen(
        [sys.executable, "-m", "impyard", "--home", str(cli.home), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        bufsize=0,
        **kwargs,
    )


def yard_with(cli: Cli, command: str | None = None) -> Cli:
    assert cli("init").code == 0
    extra = ("--command", command) if command else ()
    created = cli("imp", "create", "pia", *extra)
    assert created.code == 0, created.stderr
    return cli


def manifest(cli: Cli, run_id: str) -> dict[str, Any]:
    """The run's manifest; empty while the run's directory is made but not yet recorded."""
    path = cli.home / "runs" / run_id / "manifest.json"
    return dict(json.loads(path.read_text())) if path.exists() else {}


def wait_for(predicate: Callable[[], Any], seconds: float = 60) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("condition not met in time")


def finish(proc: subprocess.Popen[bytes], seconds: float = 120) -> tuple[bytes, bytes]:
    try:
        return proc.communicate(timeout=seconds)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_run_shows_the_box_output_as_it_happens(cli: Cli) -> None:
    yard_with(cli)
    proc = impyard(cli, "run", "pia", "--prompt", "tick", "--command", TICKS)
    assert proc.stdout is not None and proc.stderr is not None
    first_stderr = proc.stderr.readline().decode()
    first_line = proc.stdout.readline()
    first_at = time.monotonic()
    out, err = finish(proc)
    exited_at = time.monotonic()
    assert proc.returncode == 0, err
    assert first_line == b"tick 1\n"
    assert exited_at - first_at >= 1.5, "the first line came only at the end"
    run_id = first_stderr.split()[1]
    assert first_stderr.startswith(f"run {run_id} (pia, append)")
    assert f"impyard runs logs -f {run_id}" in first_stderr
    assert out.decode().splitlines() == ["tick 2", "tick 3", f"{run_id} empty"]
    # box.log keeps what it always kept.
    assert (cli.home / "runs" / run_id / "box.log").read_bytes() == b"tick 1\ntick 2\ntick 3\n"


def test_run_json_keeps_stdout_one_document(cli: Cli) -> None:
    yard_with(cli)
    result = cli("run", "pia", "--prompt", "tick", "--json", "--command", "echo hello")
    assert result.code == 0, result.stderr
    record = json.loads(result.stdout)
    assert record["checkpoint"] == "empty"
    assert record["run_id"] in result.stderr


def test_terminal_controls_from_a_box_reach_the_terminal_escaped(cli: Cli) -> None:
    yard_with(cli)
    hostile = "printf 'title \\033]0;pwned\\007 clear \\033[2J\\n'"
    result = cli("run", "pia", "--prompt", "x", "--command", hostile)
    assert result.code == 0, result.stderr
    assert "\x1b" not in result.stdout and "\x07" not in result.stdout
    assert "title \\x1b]0;pwned\\x07 clear \\x1b[2J" in result.stdout
    run_id = result.stderr.split()[1]
    logs = cli("runs", "logs", run_id)
    assert "\x1b" not in logs.stdout and "\\x1b[2J" in logs.stdout
    raw = cli("runs", "logs", run_id, "--raw")
    assert "\x1b[2J" in raw.stdout  # the box's bytes, for whoever asks for them


def test_logs_follow_a_serve_run_while_it_runs_and_ends_with_it(cli: Cli) -> None:
    yard_with(cli, command=TICKS + "; " + NOTE)
    assert cli("task", "add", "pia", "--prompt", "tick").code == 0
    server = impyard(cli, "serve", "--once")
    try:
        # The run's own directory: the runs directory also holds the spaces' lock,
        # reservations and spares, made as the run is admitted.
        runs = cli.home / "runs"
        run_id = wait_for(lambda: next((n for n in os.listdir(runs) if n.startswith("run-")), None))
        wait_for(lambda: manifest(cli, run_id).get("state") == "running")
        follower = impyard(cli, "runs", "logs", "-f", run_id, "--exit-code")
        assert follower.stdout is not None
        assert follower.stdout.readline() == b"tick 1\n"
        assert manifest(cli, run_id)["state"] != "finished", "read only after the run ended"
        out, err = finish(follower)
        assert follower.returncode == 0, err
        lines = out.decode().splitlines()
        assert lines[:2] == ["tick 2", "tick 3"]
        assert lines[-1].startswith(f"{run_id} integrated ")
        assert manifest(cli, run_id)["state"] == "finished"
    finally:
        finish(server)
    assert server.returncode == 0


def test_a_20_mb_flood_is_followed_past_the_head_with_bounded_disk(cli: Cli) -> None:
    yard_with(cli)
    detached = cli("run", "pia", "--prompt", "flood", "--detach", "--command", FLOOD)
    assert detached.code == 0, detached.stderr
    run_id = detached.stdout.strip()
    log = cli.home / "runs" / run_id / "box.log"
    peaks: list[int] = []
    done = threading.Event()

    def watch_disk() -> None:
        while not done.is_set():
            try:
                segments = [p.stat().st_size for p in live_dir(log).glob("*.seg")]
            except (FileNotFoundError, OSError):
                segments = []
            peaks.append(sum(segments))
            time.sleep(0.05)

    watcher = threading.Thread(target=watch_disk)
    watcher.start()
    try:
        follower = impyard(cli, "runs", "logs", "-f", run_id)
        out, err = finish(follower, 180)
    finally:
        done.set()
        watcher.join()
    assert follower.returncode == 0, err
    followed = out.decode().splitlines()
    assert followed[-1] == f"{run_id} empty"
    kept = log.read_bytes()
    assert followed[-2] == kept.decode().splitlines()[-1] == "FINAL-LINE"
    assert "x block 39" in followed[-3]  # the last block, read past the head bound
    assert len(out) > HEAD_BYTES + 1_000_000
    assert max(peaks) <= TAIL_BYTES + SEGMENT_BYTES
    assert len(kept) < HEAD_BYTES + TAIL_BYTES + 200  # head, marker and tail, as ever
    assert b"bytes of box output omitted here" in kept


def container_gone(container_id: str) -> bool:
    import docker
    from docker.errors import NotFound

    client = docker.from_env(timeout=10)
    try:
        client.api.inspect_container(container_id)
    except NotFound:
        return True
    finally:
        client.close()
    return False


def started_at(container_id: str) -> float:
    import docker

    client = docker.from_env(timeout=10)
    try:
        stamp = client.api.inspect_container(container_id)["State"]["StartedAt"]
    finally:
        client.close()
    whole, _, fraction = stamp.rstrip("Z").partition(".")
    moment = datetime.fromisoformat(whole + "+00:00").timestamp()
    return moment + float("0." + (fraction or "0"))


def test_detach_returns_once_the_box_runs_and_the_run_lands_exactly_once(cli: Cli) -> None:
    yard_with(cli)
    repo = Path(cli("knowledge", "pia").stdout.strip())
    env = {**os.environ, **GIT_ENV}
    env.pop("IMPYARD_HOME", None)
    # A shell that detaches a run and is then killed with everything in its group.
    shell = subprocess.Popen(
        [
            "bash",
            "-c",
            f'"{sys.executable}" -m impyard --home "{cli.home}" run pia --prompt note --detach '
            f"--command 'sleep 3; {NOTE}'; echo returned; sleep 60",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        start_new_session=True,
    )
    assert shell.stdout is not None
    run_id = shell.stdout.readline().decode().strip()
    returned_at = time.time()
    assert shell.stdout.readline() == b"returned\n"
    os.killpg(shell.pid, signal.SIGKILL)
    finish(shell)
    record = manifest(cli, run_id)
    assert record["state"] == "running"
    assert returned_at - started_at(record["container_id"]) < 1.0
    wait_for(lambda: manifest(cli, run_id)["state"] == "finished", 60)
    wait_for(lambda: container_gone(record["container_id"]), 60)  # the driver cleaned up
    assert manifest(cli, run_id)["checkpoint"] == "integrated"
    log = git("-C", repo, "log", "--format=%B", "main").stdout
    assert log.count(f"Impyard-Run: {run_id}") == 1
