"""An owner's browser on ``impyard serve --web``, for serve_bench: logged in with the data
root's token, the overview open with its live part streamed (``/overview/live``, as the
page's EventSource does), and a run page open on a run the overview lists as running,
its box output followed (``/runs/<id>/output``) until the stream's ``end``, then the next
running run's page. Standard library only (``http.client``), on two threads of the
bench's own process; everything received is counted, so the bench can show that the
client really followed.

A stream the console closes (serve stopping) is reconnected a second later, as a
browser's EventSource retries; ``stop`` shuts the open sockets, which ends a blocked read.
"""

from __future__ import annotations

import contextlib
import http.client
import re
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, fields
from http.cookies import SimpleCookie
from urllib.parse import parse_qs, urlsplit

#: A run page link in the overview's live part (run ids are ``run-<stamp>-<hex>``).
RUN_LINK = re.compile(r'href="/runs/(run-[0-9A-Za-z-]+)"')
#: Where the overview's live part stops listing running runs.
OUTCOMES = "<h2>Last outcomes"
#: How long the client keeps trying to reach a console that has not started yet.
CONNECT_SECONDS = 30.0


@dataclass
class Received:
    """What the client got: pages, events and bytes of each stream."""

    pages: int = 0
    overview_updates: int = 0
    overview_bytes: int = 0
    runs_followed: int = 0
    output_events: int = 0
    output_bytes: int = 0
    ends: int = 0
    refused: int = 0

    def add(self, other: Received) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def summary(self) -> str:
        return (
            f"{self.pages} pages, {self.overview_updates} overview updates"
            f" ({self.overview_bytes} B), {self.runs_followed} runs followed"
            f" ({self.output_events} output events, {self.output_bytes} B, {self.ends} ends),"
            f" {self.refused} refused"
        )


def token_of(login_url: str) -> str:
    """The token in a login URL (what ``impyard web --print-url`` prints)."""
    found = parse_qs(urlsplit(login_url.strip()).query).get("token")
    if not found:
        raise SystemExit(f"no token in the console's login URL {login_url!r}")
    return found[0]


class ConsoleClient:
    """Two threads (overview, run follower) against the console on ``host:port``."""

    def __init__(self, host: str, port: int, token: str) -> None:
        self.host, self.port, self.token = host, port, token
        self.received = Received()
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._logged_in = threading.Event()
        self._opened = threading.Event()
        self._changed = threading.Condition()
        self._running: list[str] = []
        self._cookies: dict[str, str] = {}
        self._open: set[http.client.HTTPConnection] = set()
        self._threads = [
            threading.Thread(target=self._overview, name="bench-overview", daemon=True),
            threading.Thread(target=self._follower, name="bench-follower", daemon=True),
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def wait_open(self, timeout: float) -> bool:
        """Whether the overview's live part arrived within ``timeout`` seconds."""
        return self._opened.wait(timeout)

    def stop(self) -> Received:
        self._stopped.set()
        with self._changed:
            self._changed.notify_all()
        with self._lock:
            for conn in self._open:
                if conn.sock is not None:
                    with contextlib.suppress(OSError):
                        conn.sock.shutdown(socket.SHUT_RDWR)
        for thread in self._threads:
            thread.join(timeout=10)
        return self.received

    def _count(self, **amounts: int) -> None:
        with self._lock:
            for name, amount in amounts.items():
                setattr(self.received, name, getattr(self.received, name) + amount)

    def _request(self, path: str, accept: str) -> http.client.HTTPConnection | None:
        """An open response to ``GET path`` (None when the console is not reachable)."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=None)
        cookie = "; ".join(f"{k}={v}" for k, v in self._cookies.items())
        try:
            conn.request("GET", path, headers={"Accept": accept, "Cookie": cookie})
        except OSError:
            conn.close()
            return None
        with self._lock:
            # Checked under the lock stop() shuts sockets under: a request sent after
            # that is closed here instead of blocking its thread on a live console.
            if self._stopped.is_set():
                conn.close()
                return None
            self._open.add(conn)
        return conn

    def _get(self, path: str, accept: str = "text/html") -> tuple[int, bytes] | None:
        conn = self._request(path, accept)
        if conn is None:
            return None
        try:
            response = conn.getresponse()
            body = response.read()
            for header in response.headers.get_all("Set-Cookie") or []:
                jar: SimpleCookie = SimpleCookie(header)
                for name, morsel in jar.items():
                    if morsel.value and morsel["max-age"] != "0":
                        self._cookies[name] = morsel.value
                    else:
                        self._cookies.pop(name, None)
            return response.status, body
        except (OSError, http.client.HTTPException):
            return None
        finally:
            self._close(conn)

    def _close(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            self._open.discard(conn)
        conn.close()

    def _log_in(self) -> bool:
        """The login URL opened, as from ``--print-url``: its answer is a redirect to the
        overview with the session cookie, which the page load then uses."""
        got = self._get(f"/login?token={self.token}")
        if got is None or got[0] != 303:
            return False
        self._logged_in.set()
        return True

    def _page(self, path: str) -> bytes:
        got = self._get(path)
        if got is None:
            return b""
        if got[0] != 200:
            self._count(refused=1)
            return b""
        self._count(pages=1)
        return got[1]

    def _stream(self, path: str, on_event: Callable[[str, str], bool], counter: str) -> None:
        """Read the event stream at ``path`` until ``on_event`` says stop or it closes."""
        conn = self._request(path, "text/event-stream")
        if conn is None:
            return
        try:
            response = conn.getresponse()
            if response.status != 200:
                self._count(refused=1)
                return
            pending = b""
            while not self._stopped.is_set():
                chunk = response.read1(65536)
                if not chunk:
                    return
                self._count(**{counter: len(chunk)})
                pending += chunk
                *whole, pending = pending.split(b"\n\n")
                for block in whole:
                    name, data = parse_event(block.decode("utf-8", errors="replace"))
                    if name and not on_event(name, data):
                        return
        except (OSError, http.client.HTTPException):
            return  # the console went away (serve stopped) or stop() shut the socket
        finally:
            self._close(conn)

    def _overview(self) -> None:
        deadline = time.monotonic() + CONNECT_SECONDS
        while not self._stopped.is_set():
            if not self._logged_in.is_set() and not self._log_in():
                if time.monotonic() > deadline or self._stopped.wait(0.05):
                    return
                continue
            self._page("/")
            self._stream("/overview/live", self._on_overview, "overview_bytes")
            self._stopped.wait(1.0)

    def _on_overview(self, name: str, data: str) -> bool:
        if name == "html":
            self._count(overview_updates=1)
            self._opened.set()
            with self._changed:
                self._running = running_in(data)
                self._changed.notify_all()
        return True

    def _follower(self) -> None:
        followed: set[str] = set()
        listed: list[str] = []
        while not self._stopped.is_set():
            with self._changed:
                fresh = [r for r in listed + self._running if r not in followed]
                if not fresh:
                    listed = []
                    self._changed.wait(0.5)
                    continue
            run_id = fresh[0]
            followed.add(run_id)
            # As a browser: the run page first; it follows only while the run is unfinished.
            if b"data-follow=" in self._page(f"/runs/{run_id}"):
                self._count(runs_followed=1)
                self._stream(f"/runs/{run_id}/output", self._on_output, "output_bytes")
            # Back to the overview (a page load, fresher than its live part's next look)
            # for the next running run.
            listed = running_in(self._page("/").decode("utf-8", errors="replace"))

    def _on_output(self, name: str, data: str) -> bool:
        if name == "output":
            self._count(output_events=1)
        elif name == "end":
            self._count(ends=1)
            return False
        return True


def running_in(html: str) -> list[str]:
    """The runs an overview (page or live part) lists as running."""
    return RUN_LINK.findall(html.split(OUTCOMES, 1)[0])


def parse_event(block: str) -> tuple[str, str]:
    """An SSE block's event name and data (its ``data:`` lines joined); a comment has none."""
    name, data = "", []
    for line in block.split("\n"):
        if line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
    return name, "\n".join(data)
