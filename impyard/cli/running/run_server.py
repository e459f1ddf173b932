"""``impyard run`` served by a running ``serve``: the run socket's server side.

A foreground ``impyard run`` spends about three quarters of its time outside its run:
the interpreter's start, typer, pydantic and pygit2 loading, the policy compiled again.
A ``serve`` has all of that loaded, so when one runs on the data root a foreground run
hands its request over the data root's run socket (``serve/run.sock``) and streams what
the run shows, as the ``docker`` CLI hands its work to the daemon. The run is driven
here exactly as ``run`` drives it in its own process (``admission.execute`` with a
context of its own: this host's engine, never serve's queue or its cluster nodes), and
what the client prints is made here by the same functions, so both read the same.

Who may connect: the socket's file is the owner's alone (0600) and each peer's uid is
checked (``SO_PEERCRED``) to be this process's or root's. A client that goes away (its
Ctrl-C, its SIGTERM, its death) interrupts its run as Ctrl-C interrupts a run in its
own process: the box is killed and the run quarantined, never integrated half-done. A
client whose version or ``IMPYARD_*`` settings differ from serve's is told to run in
its own process, so a handed-over run never runs with settings it was not given.

Protocol: one JSON line from the client, then JSON lines back: ``{"err": line}``,
``{"out": text}`` or ``{"raw": base64}`` (the box's output), and a last
``{"end": {"stdout": [...], "stderr": [...], "exit_code": N}}``; or
``{"fallback": why}`` alone, before anything ran.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import socket
import struct
import threading
import time
from collections.abc import Callable
from typing import Any

from impyard import __version__
from impyard.cli.running.handoff import handed_settings, socket_path
from impyard.common.errors import ImpyardError
from impyard.common.textsafe import StreamEscaper, visible
from impyard.home import Home
from impyard.journal.log import Journal
from impyard.runs.drive.context import RunContext
from impyard.runs.records.model import Manifest, RunOutcome, RunRequest
from impyard.settings import Settings

log = logging.getLogger(__name__)

#: The longest request line read (a prompt is text an owner typed or a file they gave).
MAX_REQUEST_BYTES = 16 * 1024 * 1024
#: The request's fields a client may set; the rest of RunRequest is serve's own.
REQUEST_FIELDS = ("imp", "prompt", "reorganize", "channel", "command", "timeout_seconds")
#: The reason a run interrupted by its client is quarantined with, as Ctrl-C's in-process.
INTERRUPTED = "host interrupted"
SHUTDOWN = "killed by the host (serve shutdown)"


class _Connection:
    """One client: JSON lines out under a lock (the output thread and the run's own share
    it); a client gone means nothing more is sent, never an error in the run."""

    def __init__(self, conn: socket.socket) -> None:
        self.conn = conn
        self._lock = threading.Lock()
        self.gone = False

    def send(self, **message: Any) -> None:
        data = (json.dumps(message) + "\n").encode()
        with self._lock:
            if self.gone:
                return
            try:
                self.conn.sendall(data)
            except OSError:
                self.gone = True


class _SocketOutput:
    """A run's box output onto the client, escaped as ``BoxOutput`` escapes it (or raw)."""

    def __init__(self, client: _Connection, raw: bool) -> None:
        self._client = client
        self._raw = raw
        self._escaper = StreamEscaper()
        self._ends_with_newline = True

    def write(self, data: bytes) -> None:
        if not data:
            return
        self._ends_with_newline = data.endswith(b"\n")
        if self._raw:
            self._client.send(raw=base64.b64encode(data).decode())
        else:
            self._client.send(out=self._escaper.feed(data))

    def close(self) -> None:
        rest = "" if self._raw else self._escaper.flush()
        if not self._ends_with_newline:
            rest += "\n"
            self._ends_with_newline = True
        if rest:
            self._client.send(out=rest)


class _HandedRun:
    """A handed-over run's state shared by its threads: its box, and whether it was
    interrupted (by its client, or by serve's shutdown) and how."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.manifest: Manifest | None = None
        self.box_id: str | None = None
        self.interrupted: str | None = None
        self.ctx: RunContext | None = None
        self.done = False


class RunServer:
    """Accepts handed-over runs on the run socket until stopped; each runs on a thread."""

    def __init__(self, home: Home, settings: Settings, journal: Journal) -> None:
        self.home = home
        self.settings = settings
        self.journal = journal
        self._listener: socket.socket | None = None
        self._runs: dict[threading.Thread, _HandedRun] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._stopped_at = 0.0

    def start(self) -> str | None:
        """Bind and listen; a reason when this serve takes no handed-over runs."""
        path = socket_path(self.home.root)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # one serve per data root: a socket here is a dead serve's
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(str(path))
            os.chmod(path, 0o600)
            listener.listen(16)
        except OSError as exc:
            listener.close()
            return f"foreground runs are not handed to this serve: {path}: {exc.strerror}"
        self._listener = listener
        threading.Thread(target=self._accept, name="run-socket", daemon=True).start()
        return None

    def request_stop(self) -> None:
        """No new runs from now; a second request kills the handed-over runs' boxes."""
        if self._stopping.is_set():
            for run in self._live_runs():
                self._interrupt(run, SHUTDOWN)
            return
        self._stopped_at = time.monotonic()
        self._stopping.set()
        if self._listener is not None:
            with contextlib.suppress(OSError):
                self._listener.shutdown(socket.SHUT_RDWR)
            self._listener.close()
            with contextlib.suppress(FileNotFoundError):
                socket_path(self.home.root).unlink()

    def stop(self, grace_seconds: float) -> None:
        """The handed-over runs get the grace (from the first stop request) to finish, then
        their boxes are killed (their runs quarantined) and they get 30 s more to end."""
        if not self._stopping.is_set():
            self.request_stop()
        deadline = self._stopped_at + grace_seconds
        for thread in self._threads():
            thread.join(max(0.0, deadline - time.monotonic()))
        for run in self._live_runs():
            self._interrupt(run, SHUTDOWN)
        for thread in self._threads():
            thread.join(30)

    @property
    def active(self) -> int:
        """Handed-over runs not ended yet."""
        return len(self._live_runs())

    def _threads(self) -> list[threading.Thread]:
        with self._lock:
            return list(self._runs)

    def _live_runs(self) -> list[_HandedRun]:
        with self._lock:
            return [run for run in self._runs.values() if not run.done]

    def _accept(self) -> None:
        assert self._listener is not None
        while not self._stopping.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            if not _owner_peer(conn):
                conn.close()
                continue
            run = _HandedRun()
            thread = threading.Thread(
                target=self._serve_one, args=(conn, run), name="handed-run", daemon=True
            )
            with self._lock:
                self._runs[thread] = run
            thread.start()

    def _serve_one(self, conn: socket.socket, run: _HandedRun) -> None:
        client = _Connection(conn)
        end: dict[str, Any] | None = None
        try:
            hello = _read_line(conn)
            why = self._refusal(hello)
            if why is not None:
                client.send(fallback=why)
            else:
                assert hello is not None
                request = RunRequest(**{k: hello["request"].get(k) for k in REQUEST_FIELDS})
                raw, as_json = bool(hello.get("raw")), bool(hello.get("json"))
                end = self._drive(client, run, request, raw, as_json)
        except ImpyardError as exc:
            lines = f"impyard: error: {exc.message}".split("\n")
            end = {"stderr": [visible(line) for line in lines], "exit_code": exc.exit_code}
        except Exception as exc:  # a bug must not take serve down with its other runs
            log.exception("a handed-over run failed unexpectedly")
            end = {"stderr": [f"impyard: unexpected error: {type(exc).__name__}: {exc}"]}
            end["exit_code"] = 70
        finally:
            with self._lock:
                self._runs.pop(threading.current_thread(), None)
        # Sent once: a run whose end was sent when it finished (``_drive``) and that failed
        # after (releasing its space) was already answered; the failure is in serve's log.
        if end is not None and not run.done:
            client.send(end=end)
        run.done = True
        with contextlib.suppress(OSError):
            conn.close()

    def _refusal(self, hello: dict[str, Any] | None) -> str | None:
        if self._stopping.is_set():
            return "serve is stopping"
        if hello is None or not isinstance(hello.get("request"), dict):
            return "an unreadable request"
        if hello.get("version") != __version__:
            return f"serve runs impyard {__version__}, this command {hello.get('version')}"
        if hello.get("settings") != handed_settings(os.environ):
            return "this command's IMPYARD_* settings differ from serve's"
        return None

    def _drive(
        self, client: _Connection, run: _HandedRun, request: RunRequest, raw: bool, as_json: bool
    ) -> dict[str, Any] | None:
        """Drive the run; what to send the client at its end (None: sent already)."""
        from impyard.cli.running.outcome import OutputStreamer, started_line
        from impyard.runs.host.admission import execute

        ctx = RunContext(settings=self.settings, journal=self.journal)
        streamer: list[OutputStreamer] = []

        def admitted(m: Manifest) -> None:
            m.handed = True  # saved with the box's start
            run.manifest = m
            client.send(err=visible(started_line(m)))
            if not as_json:
                streamer.append(OutputStreamer(self.home, m.run_id, _SocketOutput(client, raw)))

        def box_started(m: Manifest) -> None:
            with run.lock:
                run.box_id = m.container_id
                interrupted = run.interrupted
            if interrupted is not None:
                self._interrupt(run, interrupted)

        def finished(m: Manifest) -> None:
            """The outcome is final: the client is answered now, not after the box's
            removal and the space's release (which still run here)."""
            for each in streamer:
                each.finish()
            streamer.clear()
            run.done = True  # the client may go now without interrupting anything
            client.send(end=_end_of(m, as_json))

        ctx.on_admitted = admitted
        ctx.on_box_started = box_started
        ctx.on_finished = finished
        threading.Thread(
            target=self._watch_client, args=(client, run), name="handed-run-client", daemon=True
        ).start()
        run.ctx = ctx
        try:
            outcome = execute(ctx, request)
        finally:
            for each in streamer:
                each.finish()
        return None if run.done else _end_of(outcome.manifest, as_json)

    def _watch_client(self, client: _Connection, run: _HandedRun) -> None:
        """A client that closes its side (Ctrl-C) or dies interrupts its run."""
        try:
            while client.conn.recv(4096):
                pass
        except OSError:
            pass
        if not run.done:
            self._interrupt(run, INTERRUPTED)

    def _interrupt(self, run: _HandedRun, reason: str) -> None:
        """Kill the run's box (once it has one; ``box_started`` kills a box that starts
        after this), so its run is quarantined with ``reason``."""
        from impyard.box.launcher.launch import kill_box

        with run.lock:
            if run.interrupted is None:
                run.interrupted = reason
            box_id, m, ctx = run.box_id, run.manifest, run.ctx
        if box_id is None or m is None or ctx is None:
            return
        ctx.kill_reasons.setdefault(m.run_id, run.interrupted)
        ctx.killed_runs.add(m.run_id)  # before the kill: its exit must not integrate
        try:
            kill_box(box_id)
        except ImpyardError as exc:
            log.warning("could not kill %s: %s", box_id, exc)


def _end_of(m: Manifest, as_json: bool) -> dict[str, Any]:
    """What ``run`` prints once its run ended, and its exit status."""
    from impyard.cli.running.outcome import outcome_lines

    exit_code = RunOutcome(m).exit_code
    stderr = [f"impyard: warning: {visible(message)}" for message in m.warnings]
    if as_json:
        from impyard.cli.running.runs import public_record

        text = json.dumps(public_record(m), indent=2, sort_keys=True, default=str)
        return {"stdout": text.split("\n"), "stderr": stderr, "exit_code": exit_code}
    stdout = [visible(line) for line in outcome_lines(m)]
    return {"stdout": stdout, "stderr": stderr, "exit_code": exit_code}


def _owner_peer(conn: socket.socket) -> bool:
    """Whether the peer runs as this process's user, or as root."""
    try:
        raw = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except OSError:
        return False
    _pid, uid, _gid = struct.unpack("3i", raw)
    return uid in (0, os.geteuid())


def _read_line(conn: socket.socket) -> dict[str, Any] | None:
    """The client's request line, None if it is not one JSON object within the bound."""
    chunks: list[bytes] = []
    size = 0
    while True:
        data = conn.recv(65536)
        if not data:
            return None
        chunks.append(data)
        size += len(data)
        if b"\n" in data:
            break
        if size > MAX_REQUEST_BYTES:
            return None
    line = b"".join(chunks).split(b"\n", 1)[0]
    try:
        value = json.loads(line)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def started_serving(
    home: Home, settings: Settings, journal: Journal, report: Callable[[str], None]
) -> RunServer:
    """A run server listening on ``home``'s run socket (``report`` says why not, if not)."""
    server = RunServer(home, settings, journal)
    why = server.start()
    if why is not None:
        report(why)
    return server
