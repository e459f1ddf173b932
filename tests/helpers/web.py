"""The console over a real data root, driven with Starlette's test client (HTTP in
process, no socket), and a finished run written as the pipeline writes one."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from starlette.testclient import TestClient

from impyard.home import Home
from impyard.settings import load_settings
from impyard.web.access.console import Console, open_console
from impyard.web.access.listen import checked_listen
from impyard.web.serving.app import build_app
from tests.helpers.runs import write_run

_CSRF = re.compile(r'name="csrf" value="([^"]+)"')


def console_for(home: Path, *, metrics_public: bool = False) -> tuple[Console, TestClient]:
    listen = checked_listen(
        "127.0.0.1:0",
        allow_remote=False,
        tls_cert=None,
        tls_key=None,
        metrics_public=metrics_public,
    )
    console = open_console(Home(home), load_settings(home), listen)
    return console, TestClient(build_app(console), base_url="http://127.0.0.1")


def log_in(console: Console, client: TestClient) -> str:
    """Log in with the token; the session's CSRF token, as a page's forms carry it."""
    answer = client.get(f"/login?token={console.token}")
    assert answer.status_code == 200, answer.text
    found = _CSRF.search(answer.text)
    assert found, "a logged-in page carries the CSRF token in its forms"
    return found.group(1)


def finished_run(home: Path, run_id: str, outcome: str = "integrated", **fields: Any) -> None:
    write_run(
        Home(home),
        run_id,
        state="finished",
        checkpoint=outcome,
        started_at="2026-07-11T12:00:00Z",
        ended_at="2026-07-11T12:00:30Z",
        timings_ms={"prepare": 120.0, "box": 25000.0, "checkpoint": 300.0},
        **fields,
    )
