"""The console's login URL works wherever it listens: ``impyard web`` prints it at start
for the address it bound, and ``web --print-url`` prints the running console's (recorded
in the data root while it runs), or the address ``--listen`` names."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tests.helpers.cli import Cli
from tests.helpers.git import GIT_ENV


@pytest.fixture
def home(cli: Cli) -> Cli:
    assert cli("init").code == 0
    return cli


@contextmanager
def web(cli: Cli, *args: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """``impyard web`` as a process, and the line it printed as it started."""
    with subprocess.Popen(
        [sys.executable, "-m", "impyard", "--home", str(cli.home), "web", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **GIT_ENV},
    ) as proc:
        assert proc.stdout is not None
        try:
            yield proc, proc.stdout.readline().strip()
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            proc.communicate(timeout=30)


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


def logs_in(url: str) -> bool:
    """Whether opening ``url`` logs a browser in (a session cookie and a redirect home)."""
    opener = urllib.request.build_opener(NoRedirect)
    try:
        opener.open(url, timeout=10)
    except urllib.error.HTTPError as answer:
        return answer.code == 303 and "impyard_session=" in answer.headers.get("set-cookie", "")
    return False


def test_web_prints_a_working_login_url_and_print_url_finds_the_running_console(
    home: Cli,
) -> None:
    token = (home.home / "web-token").read_text().strip()
    with web(home, "--listen", "127.0.0.1:0") as (proc, started):
        assert started.startswith("console: http://127.0.0.1:"), started
        base = started.split()[1]
        assert started == f"console: {base} (log in: {base}/login?token={token})"
        assert base != "http://127.0.0.1:8470"
        assert logs_in(f"{base}/login?token={token}")
        printed = home("web", "--print-url")
        assert printed.code == 0, printed.stderr
        assert printed.stdout == f"{base}/login?token={token}\n"
        named = home("web", "--print-url", "--listen", "127.0.0.1:9000")
        assert named.stdout == f"http://127.0.0.1:9000/login?token={token}\n"
    assert proc.returncode is not None
    # Stopped: nothing runs there any more, so the default address again.
    after = home("web", "--print-url")
    assert after.stdout == f"http://127.0.0.1:8470/login?token={token}\n"


def test_a_record_left_by_a_killed_console_is_ignored(home: Cli) -> None:
    with web(home, "--listen", "127.0.0.1:0") as (proc, started):
        assert started.startswith("console: "), started
        proc.kill()
        proc.wait(timeout=30)
        assert (home.home / "web-console.json").exists()
        printed = home("web", "--print-url")
        assert printed.stdout.startswith("http://127.0.0.1:8470/login?token="), printed.stdout
