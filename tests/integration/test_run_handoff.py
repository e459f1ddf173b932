"""A foreground ``impyard run`` handed to a running ``serve`` over the run socket: it shows
what an in-process run shows and exits as it would, its Ctrl-C and serve's stop
quarantine the run, other settings run in-process, and no other user gets in."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.cli import Cli
from tests.helpers.git import GIT_ENV
from tests.helpers.warm import serving, wait_for

pytestmark = pytest.mark.docker

NOTE = 'printf "body\\n" | impyard-note vendors acme-sso --source https://example.com/report'
RUN_ID = re.compile(r"run-\d{8}T\d{6}Z-[0-9a-f]{10}")


def impyard(home: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """The console command as an owner types it (the entry point that hands runs over)."""
    full_env = {**os.environ, **GIT_ENV, **(env or {})}
    full_env.pop("IMPYARD_HOME", None)
    return subprocess.Popen(
        [sys.executable, "-m", "impyard", "--home", str(home), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=full_env,
    )


def finished(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=120)
    assert "Traceback" not in err, err
    return proc.returncode, out, err


def run(home: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    return finished(impyard(home, "run", "yuko", "--prompt", "research acme", *args, env=env))


def in_process(home: Path, *args: str) -> tuple[int, str, str]:
    return run(home, *args, env={"IMPYARD_HANDOFF": "0"})


def manifest(home: Path, run_id: str) -> dict[str, Any]:
    record: dict[str, Any] = json.loads((home / "runs" / run_id / "manifest.json").read_text())
    return record


def shape(text: str) -> str:
    """What a run printed with its run id, namespace and commits made the same."""
    text = RUN_ID.sub("RUN", text)
    text = re.sub(r"n_[0-9a-f]{12}", "NS", text)
    return re.sub(r"\b[0-9a-f]{40}\b", "COMMIT", text)


@pytest.fixture
def yard(cli: Cli) -> Iterator[Path]:
    assert cli("init").code == 0
    assert cli("imp", "create", "yuko").code == 0
    with serving(cli.home):
        wait_for("serve's run socket", (cli.home / "serve" / "run.sock").is_socket)
        yield cli.home


def test_a_handed_run_shows_and_exits_as_an_in_process_run(yard: Path) -> None:
    for args, code in (
        (("--command", NOTE), 0),
        (("--command", 'echo changed >> "$IMPYARD_KNOWLEDGE_DIR/README.md"'), 3),
        (("--command", "echo out; exit 7"), 4),
    ):
        handed, local = run(yard, *args), in_process(yard, *args)
        assert handed[0] == local[0] == code, (handed, local)
        assert shape(handed[1]) == shape(local[1]), (handed, local)
        assert shape(handed[2]) == shape(local[2]), (handed, local)
        (handed_id,) = set(RUN_ID.findall(handed[2]))
        (local_id,) = set(RUN_ID.findall(local[2]))
        assert manifest(yard, handed_id)["handed"] is True
        assert manifest(yard, local_id)["handed"] is False
    # An error is the CLI's one line and exit status; --json is the run's record.
    nosuch = finished(impyard(yard, "run", "nosuch", "--prompt", "x"))
    assert nosuch[0] == 2 and nosuch[2].startswith("impyard: error: no imp named 'nosuch'")
    code, out, _ = run(yard, "--json", "--command", NOTE)
    record = json.loads(out)
    assert code == 0 and record["handed"] is True and record["checkpoint"] == "integrated"


def test_a_prompt_from_stdin_reaches_the_box(yard: Path) -> None:
    command = ["run", "yuko", "--prompt-file", "-", "--command", 'cat "$IMPYARD_TASK_FILE"']
    proc = subprocess.run(
        [sys.executable, "-m", "impyard", "--home", str(yard), *command],
        input="find the SAML vendor\n",
        capture_output=True,
        text=True,
        env={**os.environ, **GIT_ENV},
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "find the SAML vendor" in proc.stdout
    (run_id,) = set(RUN_ID.findall(proc.stderr))
    assert manifest(yard, run_id)["handed"] is True


def wait_running(home: Path, proc: subprocess.Popen[str]) -> str:
    def running() -> bool:
        return any(
            json.loads(p.read_text()).get("state") == "running"
            for p in (home / "runs").glob("*/manifest.json")
        )

    wait_for("a running box", running)
    assert proc.poll() is None
    (path,) = [p for p in (home / "runs").glob("*/manifest.json") if "running" in p.read_text()]
    return path.parent.name


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_of_a_handed_run_quarantines_it(yard: Path, stop: signal.Signals) -> None:
    proc = impyard(yard, "run", "yuko", "--prompt", "x", "--command", "echo up; sleep 60")
    run_id = wait_running(yard, proc)
    proc.send_signal(stop)
    code, out, _ = finished(proc)
    assert code == 4 and f"{run_id} quarantined (host interrupted)" in out, out
    m = manifest(yard, run_id)
    assert m["handed"] is True and m["checkpoint"] == "quarantined"


def test_a_client_that_dies_quarantines_its_run(yard: Path) -> None:
    proc = impyard(yard, "run", "yuko", "--prompt", "x", "--command", "sleep 60")
    run_id = wait_running(yard, proc)
    proc.kill()
    proc.communicate()
    wait_for("the run ended", lambda: manifest(yard, run_id)["state"] == "finished")
    assert manifest(yard, run_id)["reason"] == "host interrupted"


def test_a_serve_stopping_kills_a_handed_run_after_its_grace(cli: Cli) -> None:
    assert cli("init").code == 0
    assert cli("imp", "create", "yuko").code == 0
    grace = {"IMPYARD_SHUTDOWN_GRACE_SECONDS": "1"}
    os.environ.update(grace)  # serve and its client must share their settings
    try:
        with serving(cli.home) as serve:
            wait_for("serve's run socket", (cli.home / "serve" / "run.sock").is_socket)
            proc = impyard(cli.home, "run", "yuko", "--prompt", "x", "--command", "sleep 60")
            run_id = wait_running(cli.home, proc)
            serve.send_signal(signal.SIGTERM)
            code, out, _ = finished(proc)
    finally:
        for key in grace:
            os.environ.pop(key)
    assert code == 4, out
    assert manifest(cli.home, run_id)["reason"] == "killed by the host (serve shutdown)"
    assert not (cli.home / "serve" / "run.sock").exists()


def test_other_settings_run_in_process(yard: Path) -> None:
    code, _, err = run(yard, "--command", NOTE, env={"IMPYARD_DOCKER_TIMEOUT_SECONDS": "77"})
    assert code == 0, err
    (run_id,) = set(RUN_ID.findall(err))
    assert manifest(yard, run_id)["handed"] is False


def test_another_user_cannot_hand_a_run_over(yard: Path, tmp_path: Path) -> None:
    path = yard / "serve" / "run.sock"
    assert path.stat().st_mode & 0o777 == 0o600
    # Even where a path and the file's mode let another user in, serve checks who
    # connects: a link to the socket outside the (owner-only) data root, open to all.
    link = Path("/tmp") / f"impyard-test-{tmp_path.name}-{os.getpid()}.sock"
    os.link(path, link)
    try:
        os.chmod(link, 0o666)
        hello = json.dumps({"request": {"imp": "yuko", "prompt": "x", "command": "true"}})
        script = (
            "import os, socket, sys\n"
            "os.setgid(65534); os.setuid(65534)\n"
            "s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])\n"
            "try:\n"
            "    s.sendall(sys.argv[2].encode() + b'\\n')\n"
            "    print('answered' if s.recv(4096) else 'closed')\n"
            "except (BrokenPipeError, ConnectionResetError):\n"
            "    print('closed')\n"
        )
        proc = subprocess.run(
            [sys.executable, "-c", script, str(link), hello], capture_output=True, text=True
        )
    finally:
        link.unlink()
    assert proc.stdout.strip() == "closed", proc  # at once, unanswered
    time.sleep(0.5)
    assert not list((yard / "runs").glob("*/manifest.json"))
    with socket.socket(socket.AF_UNIX) as mine:  # the owner still gets in
        mine.connect(str(path))
