"""The console inside ``impyard serve --web``: checked, bound and started on a thread
before the worker takes its first task, stopped after it ends."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from impyard.home import Home
from impyard.settings import Settings
from impyard.web.access.console import Console
from impyard.web.access.listen import checked_listen
from impyard.web.access.token import ensure_token
from impyard.web.serving.address import ConsoleRecord
from impyard.web.serving.server import Background, bind, bound_port


class RecordedConsole:
    """The console beside serve, recorded in the data root until it stops."""

    def __init__(self, running: Background, record: ConsoleRecord) -> None:
        self.running = running
        self._record = record

    def stop(self) -> None:
        try:
            self.running.stop()
        finally:
            self._record.close()


def start_console(
    home: Home,
    settings: Settings,
    address: str,
    *,
    allow_remote: bool,
    tls_cert: Path | None,
    tls_key: Path | None,
    metrics_public: bool,
) -> RecordedConsole:
    listen = checked_listen(
        address,
        allow_remote=allow_remote,
        tls_cert=tls_cert,
        tls_key=tls_key,
        metrics_public=metrics_public,
    )
    sock = bind(listen)
    listen = dataclasses.replace(listen, port=bound_port(sock))
    running = Background(Console(home, settings, listen, ensure_token(home.web_token)), sock)
    running.start()
    # Recorded, so that `impyard web --print-url` prints this console's address.
    recorded = RecordedConsole(running, ConsoleRecord(home, listen))
    # On stderr: serve's stdout is its event lines, one per task event. Not the token
    # itself: serve's output goes to logs (journalctl) that others may read.
    sys.stderr.write(f"impyard: console: {listen.url} (log in: impyard web --print-url)\n")
    sys.stderr.flush()
    return recorded
