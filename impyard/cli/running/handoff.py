"""``impyard run`` handed to a running ``serve``: the client side, loaded before the CLI.

When a ``serve`` listens on the data root's run socket, a foreground run sends it the
request and shows what comes back (see ``run_server``), so the run costs no interpreter
full of typer, pydantic and pygit2. Only the stdlib and ``impyard.home`` load here. Any
command line this module does not read exactly as ``run`` would (``--detach``,
``--help``, an unknown or repeated option, global options other than ``--home``) runs
in-process as before, as does every run when no serve listens, when serve says so
(another version, other ``IMPYARD_*`` settings), or when ``IMPYARD_HANDOFF=0``.
Ctrl-C or SIGTERM closes the request's side of the socket: serve kills the box and the
run is quarantined, as in-process; its outcome is still shown.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import math
import os
import signal
import socket
import sys
from collections.abc import Mapping
from pathlib import Path
from types import FrameType
from typing import Any

#: Options of ``run`` that take a value, by the request field (or client choice) they set.
VALUE_OPTIONS = {
    "--prompt": "prompt",
    "--prompt-file": "prompt_file",
    "--command": "command",
    "--channel": "channel",
    "--timeout": "timeout_seconds",
}
FLAG_OPTIONS = {"--reorganize": "reorganize", "--raw": "raw", "--json": "json"}
#: What a client reports when serve went away before the run's end reached it.
LOST_EXIT = 1


def handed_settings(environ: Mapping[str, str]) -> dict[str, str]:
    """Every ``IMPYARD_*`` variable but the data root's (both sides found the same one)
    and this switch, each by its value's SHA-256: a handed-over run runs only where these
    are the same, and a secret (``IMPYARD_SECRET_*``) never crosses the socket."""
    found = {}
    for key, value in environ.items():
        name = key.upper()
        if name.startswith("IMPYARD_") and name not in ("IMPYARD_HOME", "IMPYARD_HANDOFF"):
            found[name] = hashlib.sha256(value.encode(errors="surrogateescape")).hexdigest()
    return found


def socket_path(root: Path) -> Path:
    return root / "serve" / "run.sock"


def parse(args: list[str]) -> dict[str, Any] | None:
    """``[--home H] run IMP`` and ``run``'s own options as a dict; None for anything else."""
    parsed: dict[str, Any] = {"home": None}
    if args[:1] == ["--home"] and len(args) > 2:
        parsed["home"], args = args[1], args[2:]
    elif args[:1] and args[0].startswith("--home="):
        parsed["home"], args = args[0].removeprefix("--home="), args[1:]
    if args[:1] != ["run"]:
        return None
    tokens = iter(args[1:])
    for token in tokens:
        name, eq, inline = token.partition("=")
        if token.startswith("-") and name in VALUE_OPTIONS:
            value = inline if eq else next(tokens, None)
            if value is None or VALUE_OPTIONS[name] in parsed:
                return None
            parsed[VALUE_OPTIONS[name]] = value
        elif token in FLAG_OPTIONS and FLAG_OPTIONS[token] not in parsed:
            parsed[FLAG_OPTIONS[token]] = True
        elif token.startswith("-") or "imp" in parsed:
            return None
        else:
            parsed["imp"] = token
    if "imp" not in parsed or ("prompt" in parsed) == ("prompt_file" in parsed):
        return None
    if "timeout_seconds" in parsed:
        try:
            timeout = float(parsed["timeout_seconds"])
        except ValueError:
            return None
        if not math.isfinite(timeout) or timeout < 0.1:
            return None
        parsed["timeout_seconds"] = timeout
    return parsed


def handed_off(args: list[str]) -> int | list[str]:
    """The run's exit status when serve ran it; else the arguments to run in-process."""
    if os.environ.get("IMPYARD_HANDOFF") == "0":
        return args
    parsed = parse(args)
    if parsed is None:
        return args
    from impyard.home import resolve_home_source

    home = Path(parsed["home"]) if parsed["home"] is not None else None
    path = socket_path(resolve_home_source(home).root)
    if not path.is_socket():
        return args
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(str(path))
    except OSError:
        conn.close()
        return args
    with conn:
        prompt = _prompt(parsed)
        if prompt is None:
            return args  # unreadable or empty: the CLI says why
        fields = {key: parsed.get(key) for key in ("imp", "command", "channel", "timeout_seconds")}
        request = {**fields, "prompt": prompt, "reorganize": parsed.get("reorganize", False)}
        hello = {
            "version": _version(),
            "settings": handed_settings(os.environ),
            "request": request,
            "raw": parsed.get("raw", False),
            "json": parsed.get("json", False),
        }
        try:
            conn.sendall((json.dumps(hello) + "\n").encode())
        except OSError:
            return args
        return _show(conn, args, parsed)


def _version() -> str:
    from impyard import __version__

    return __version__


def _prompt(parsed: dict[str, Any]) -> str | None:
    if "prompt" in parsed:
        text = str(parsed["prompt"])
    else:
        source = parsed["prompt_file"]
        try:
            text = sys.stdin.read() if source == "-" else Path(source).read_text()
        except (OSError, UnicodeDecodeError):
            return None
        if source == "-":
            parsed["prompt_from_stdin"] = text
    return text if text.strip() else None


def _show(conn: socket.socket, args: list[str], parsed: dict[str, Any]) -> int | list[str]:
    """Show what serve sends until the run's end; Ctrl-C (or SIGTERM) interrupts the run."""

    def interrupt(signum: int, frame: FrameType | None) -> None:
        # Serve kills the box and its end still comes. Told from the handler, wherever the
        # loop is: a KeyboardInterrupt raised while a line was written escaped as a traceback.
        with contextlib.suppress(OSError):
            conn.shutdown(socket.SHUT_WR)

    # Serve escaped every line it sent (as ``echo`` does); escaping is idempotent, and a
    # line is shown only once it is this process's own view of it.
    from impyard.common.textsafe import visible

    before = {stop: signal.signal(stop, interrupt) for stop in (signal.SIGINT, signal.SIGTERM)}
    stdout_broken = False
    lines = _Lines(conn)
    while True:
        message = lines.next()
        if message is None:
            sys.stderr.write("impyard: error: serve went away before the run ended\n")
            return LOST_EXIT
        if "fallback" in message:
            for stop, handler in before.items():
                if handler is not None:  # the run in this process handles its own
                    signal.signal(stop, handler)
            return _in_process(args, parsed)
        if "err" in message:
            sys.stderr.write(visible(message["err"]) + "\n")
            sys.stderr.flush()
        elif ("out" in message or "raw" in message) and not stdout_broken:
            stdout_broken = not _write_out(message)
        elif "end" in message:
            end = message["end"]
            for line in end.get("stderr", []):
                sys.stderr.write(visible(line) + "\n")
            if not stdout_broken:
                for line in end.get("stdout", []):
                    sys.stdout.write(visible(line) + "\n")
            return int(end.get("exit_code", LOST_EXIT))


class _Lines:
    """Serve's JSON lines; an interrupt while waiting for one loses nothing read."""

    def __init__(self, conn: socket.socket) -> None:
        self._conn = conn
        self._pending = b""
        self._ready: list[bytes] = []

    def next(self) -> dict[str, Any] | None:
        """The next message; None once serve closed the connection."""
        while not self._ready:
            data = self._conn.recv(65536)
            if not data:
                return None
            *lines, self._pending = (self._pending + data).split(b"\n")
            self._ready.extend(lines)
        message: dict[str, Any] = json.loads(self._ready.pop(0))
        return message


def _write_out(message: dict[str, Any]) -> bool:
    """Write box output; False once the reader went away (``| head``): the run goes on."""
    try:
        if "raw" in message:
            sys.stdout.flush()
            sys.stdout.buffer.write(base64.b64decode(message["raw"]))
            sys.stdout.buffer.flush()
        else:
            sys.stdout.write(message["out"])
            sys.stdout.flush()
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return False
    return True


def _in_process(args: list[str], parsed: dict[str, Any]) -> list[str]:
    """The arguments for running in-process; a prompt already read from stdin is given
    as ``--prompt`` (stdin has been read)."""
    if "prompt_from_stdin" not in parsed:
        return args
    out = list(args)
    for i, token in enumerate(out):
        if token == "--prompt-file" and i + 1 < len(out) and out[i + 1] == "-":
            return [*out[:i], "--prompt", parsed["prompt_from_stdin"], *out[i + 2 :]]
        if token == "--prompt-file=-":
            return [*out[:i], "--prompt", parsed["prompt_from_stdin"], *out[i + 1 :]]
    return out
