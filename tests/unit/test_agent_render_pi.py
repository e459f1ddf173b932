"""``box/agent-render`` with Pi's parser ``box/pi/events.js``, the Pi adapter's step
renderer, and ``box/pi/steps.js``, the Pi
extension that feeds it, run by the host's node. A stand-in Pi writes canned events (the
shapes Pi 0.73.1 hands its extensions) to the events descriptor and an answer to stdout:
one bounded line per step, no raw terminal control from the model or a tool, Pi's exit
status kept, signals passed on, and the step count reported to the gateway named by the
box's proxy."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.agent_render import (
    BOX,
    NODE,
    needs_node,
    render_command,
    render_stand_in,
    step_lines,
)

EXTENSION = BOX / "pi" / "steps.js"
pytestmark = needs_node()


ESC_TITLE, ESC_CLEAR = "\x1b]0;pwned\x07", "\x1b[2J"
SHOWN_TITLE, SHOWN_CLEAR = r"\x1b]0;pwned\x07", r"\x1b[2J"
# Everything a terminal acts on but newline and tab: C0, DEL, C1 (UTF-8), bidi overrides.
RAW = [chr(c) for c in (*range(0x00, 0x09), *range(0x0B, 0x20), 0x7F, *range(0x80, 0xA0))]
RAW += ["\u202e", "\u2066", "\u2028", "\u200f"]


def assistant(*content: dict[str, Any], stop: str = "stop", **extra: Any) -> dict[str, Any]:
    message = {
        "role": "assistant",
        "content": list(content),
        "usage": {"totalTokens": 15},
        "stopReason": stop,
        **extra,
    }
    return {"type": "message_end", "message": message}


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def call(name: str, **args: Any) -> dict[str, Any]:
    return {"type": "toolCall", "id": "call_1", "name": name, "arguments": args}


def tool(name: str, args: dict[str, Any], result: str, error: bool = False) -> list[Any]:
    return [
        {"type": "tool_execution_start", "toolCallId": "c", "toolName": name, "args": args},
        {"type": "tool_execution_update", "toolCallId": "c", "toolName": name, "args": args},
        {
            "type": "tool_execution_end",
            "toolCallId": "c",
            "toolName": name,
            "result": {"content": [text(result)]},
            "isError": error,
        },
    ]


def session(*turns: list[Any]) -> list[Any]:
    events: list[Any] = [{"type": "session", "version": 3}, {"type": "agent_start"}]
    for turn in turns:
        events += [{"type": "turn_start"}, *turn, {"type": "turn_end"}]
    return [*events, {"type": "agent_end", "messages": []}]


HOSTILE = session(
    [
        {"type": "message_update", "message": {"role": "assistant", "content": [text("x")]}},
        assistant(text(f"Looking{ESC_CLEAR} \u202eevil"), call("bash", command="ls")),
        *tool("bash", {"command": f"echo {ESC_TITLE}\nrm -rf /tmp/x"}, f"out{ESC_TITLE}\n2\n"),
    ],
    [
        assistant(call("write", path="/k/records/a.md", content="x" * 500)),
        *tool("write", {"path": "/k/records/a.md", "content": "x" * 500}, "Wrote 500 bytes"),
        *tool("read", {"path": "/nope"}, f"ENOENT\x9b2J{ESC_CLEAR}\n", error=True),
    ],
    [assistant(text("Done"))],
)
ANSWER = f"Done:\n\tout{ESC_TITLE} {ESC_CLEAR}\x7f\x00\r\u2028\u200f\n"


@dataclass
class Pi:
    """A stand-in Pi: its events, its answer (stdout), then a shell command."""

    events: list[Any]
    answer: str = ""
    then: str = ""


def render(
    tmp_path: Path, pi: Pi, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    """agent-render running ``pi``: events to the descriptor named in IMPYARD_PI_EVENTS_FD,
    then the answer on stdout, then ``pi.then``."""
    answer = tmp_path / "answer.txt"
    answer.write_text(pi.answer)
    script = f'cat "$0" >&"$IMPYARD_PI_EVENTS_FD"; cat "$1"; {pi.then}'
    return render_stand_in(tmp_path, "pi", pi.events, script, str(answer), env=env)


def steps(out: bytes) -> list[str]:
    return step_lines(out, "pi")


def test_each_step_is_one_bounded_line_and_nothing_raw_reaches_the_output(
    tmp_path: Path,
) -> None:
    done = render(tmp_path, Pi(HOSTILE, ANSWER))
    assert done.returncode == 0, done.stderr
    for raw in RAW:
        assert raw.encode() not in done.stdout + done.stderr, repr(raw)
    lines = steps(done.stdout)
    assert all(len(line) <= 160 for line in lines)
    assert lines == [
        rf"[pi] model turn 1 (0.0 s, 15 tokens): 1 tool call, says: Looking{SHOWN_CLEAR} "
        r"\u202eevil",
        rf"[pi] tool bash: echo {SHOWN_TITLE}\nrm -rf /tmp/x",
        rf"[pi] result bash: 16 bytes, 2 lines: out{SHOWN_TITLE}",
        "[pi] model turn 2 (0.0 s, 15 tokens): 1 tool call",
        # A call shows its main argument, then the names of the others.
        "[pi] tool write: /k/records/a.md (+content)",
        "[pi] result write: 15 bytes, 1 line: Wrote 500 bytes",
        "[pi] tool read: /nope",
        rf"[pi] result read: failed, 15 bytes, 1 line: ENOENT\x9b2J{SHOWN_CLEAR}",
        "[pi] model turn 3 (0.0 s, 15 tokens): answered",
        "[pi] answer after 3 model turns and 3 tool calls:",
    ]
    # The answer in full after the last step: newlines and tabs kept, controls escaped.
    answer = done.stdout.decode().split(lines[-1] + "\n", 1)[1]
    assert answer == f"Done:\n\tout{SHOWN_TITLE} {SHOWN_CLEAR}\\x7f\\x00\\r\\u2028\\u200f\n"


def test_a_long_step_is_cut_to_160_characters_with_an_ellipsis(tmp_path: Path) -> None:
    turn = [assistant(call("bash")), *tool("bash", {"command": "echo " + "y" * 400}, "")]
    done = render(tmp_path, Pi(session(turn)))
    (line,) = [s for s in steps(done.stdout) if "tool bash" in s]
    assert len(line) == 160 and line.endswith("y…")


def test_pis_exit_status_is_kept_and_a_signal_death_is_128_plus_n(tmp_path: Path) -> None:
    assert render(tmp_path, Pi(HOSTILE, then="exit 7")).returncode == 7
    killed = render(tmp_path, Pi(HOSTILE, then="kill -TERM $$"))
    assert killed.returncode == 128 + signal.SIGTERM


def test_a_process_pi_left_behind_does_not_keep_the_box_running(tmp_path: Path) -> None:
    """A tool's background process inherits Pi's outputs; once Pi exits, agent-render waits
    for them a moment only (render's own timeout would fail this test otherwise)."""
    pidfile = tmp_path / "orphan.pid"
    done = render(tmp_path, Pi(HOSTILE, ANSWER, then=f"sleep 120 & echo $! >{pidfile}; exit 0"))
    try:
        assert done.returncode == 0
        assert steps(done.stdout)[-1] == "[pi] answer after 3 model turns and 3 tool calls:"
    finally:
        os.kill(int(pidfile.read_text()), signal.SIGKILL)


def test_a_model_error_is_a_step_and_pis_own_report_is_relayed_escaped(tmp_path: Path) -> None:
    """Pi's text mode prints a model error on stderr and exits 1: both reach the box."""
    failed = assistant(stop="error", errorMessage=f"429 over budget {ESC_CLEAR}")
    pi = Pi(session([failed], [failed]), then=f"printf '429 over budget {ESC_CLEAR}\n' >&2; exit 1")
    done = render(tmp_path, pi)
    assert done.returncode == 1
    assert done.stderr.decode() == f"429 over budget {SHOWN_CLEAR}\n"
    assert steps(done.stdout) == [
        f"[pi] model turn 1 (0.0 s, 15 tokens): error: 429 over budget {SHOWN_CLEAR}",
        f"[pi] model turn 2 (0.0 s, 15 tokens): error: 429 over budget {SHOWN_CLEAR}",
    ]


def test_lines_that_are_not_events_and_pis_stderr_are_escaped(tmp_path: Path) -> None:
    pi = Pi([], then=f"printf 'warn{ESC_TITLE}\n' >&3; printf 'x{ESC_CLEAR}\n' >&2")
    done = render(tmp_path, pi)
    assert done.stdout.decode() == f"[pi] (not an event) warn{SHOWN_TITLE}\n"
    assert done.stderr.decode() == f"x{SHOWN_CLEAR}\n"


def recorder(bodies: list[tuple[str, bytes]]) -> type[BaseHTTPRequestHandler]:
    """A stand-in gateway that answers 200 and keeps each POST's path and body."""

    class Recorder(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            bodies.append((self.path, self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.send_header("Content-Length", "3")
            self.end_headers()
            self.wfile.write(b"ok\n")

        def log_message(self, format: str, *args: object) -> None:
            del format, args

    return Recorder


@dataclass
class StandIn:
    port: int
    bodies: list[tuple[str, bytes]]


@pytest.fixture
def gateway() -> Iterator[StandIn]:
    bodies: list[tuple[str, bytes]] = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), recorder(bodies))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield StandIn(server.server_address[1], bodies)
    server.shutdown()
    server.server_close()


def test_the_step_count_is_reported_to_the_gateway_once_at_the_end(
    tmp_path: Path, gateway: StandIn
) -> None:
    proxy = {"HTTP_PROXY": f"http://127.0.0.1:{gateway.port}"}
    done = render(tmp_path, Pi(HOSTILE, then="exit 3"), env=proxy)
    assert done.returncode == 3 and done.stderr == b""
    assert gateway.bodies == [("/impyard/report", b'{"agent_steps":3}')]


def test_without_a_gateway_nothing_is_reported_and_nothing_said(tmp_path: Path) -> None:
    done = render(tmp_path, Pi(HOSTILE))
    assert done.returncode == 0 and done.stderr == b""


def test_an_unanswered_report_is_one_line_and_keeps_the_exit_status(tmp_path: Path) -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]  # nothing listens there
    done = render(tmp_path, Pi(HOSTILE), env={"HTTP_PROXY": f"http://127.0.0.1:{port}/"})
    assert done.returncode == 0
    assert done.stderr.decode().startswith("agent-render: step count not reported: ")
    assert done.stderr.count(b"\n") == 1


def test_sigterm_is_passed_on_to_pi_and_its_status_kept(tmp_path: Path) -> None:
    assert NODE is not None
    ready = tmp_path / "ready"
    pi = f"trap 'echo got-term >&2; exit 5' TERM; touch {ready}; while :; do sleep 0.05; done"
    proc = subprocess.Popen(
        [*render_command("pi"), "/bin/sh", "-c", pi], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + 20
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=20)
    assert (proc.returncode, out, err) == (5, b"", b"got-term\n")


EXTENSION_DRIVER = """
import steps from "./steps.mjs";
const handlers = {};
steps({ on: (type, handler) => { handlers[type] = handler; } });
const fire = (type, event) => handlers[type] && handlers[type](event);
fire("turn_start", { turnIndex: 0 });
fire("message_update", { message: { role: "assistant", content: [] } });
fire("message_end", { message: { role: "user", content: "the whole task" } });
fire("message_end", { message: { role: "assistant", content: [], stopReason: "stop" } });
fire("tool_execution_start", { toolName: "bash", args: { command: "ls" } });
fire("tool_execution_end", { toolName: "bash", result: { content: [] }, isError: false });
fire("message_end", { message: { role: "toolResult", content: "the tool's output again" } });
console.log(Object.keys(handlers).sort().join(" "));
"""


def extension(tmp_path: Path, redirect: str, env: dict[str, str]) -> tuple[str, list[str]]:
    """The events the steps extension writes when Pi fires a canned set, and the event
    types it subscribed to."""
    shutil.copy(EXTENSION, tmp_path / "steps.mjs")
    (tmp_path / "driver.mjs").write_text(EXTENSION_DRIVER)
    out = tmp_path / "events.jsonl"
    done = subprocess.run(
        ["/bin/sh", "-c", f'"$0" driver.mjs {redirect}', str(NODE)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, **env, "EVENTS": str(out)},
        timeout=30,
    )
    assert done.returncode == 0 and done.stderr == "", done.stderr
    written = out.read_text().splitlines() if out.exists() else []
    return done.stdout.strip(), [json.loads(line)["type"] for line in written]


def test_the_extension_writes_each_step_event_once_and_no_streamed_update(
    tmp_path: Path,
) -> None:
    subscribed, written = extension(tmp_path, '3>"$EVENTS"', {"IMPYARD_PI_EVENTS_FD": "3"})
    assert subscribed == "message_end tool_execution_end tool_execution_start turn_start"
    # The assistant's message only: the task and a tool's output are not repeated.
    assert written == ["turn_start", "message_end", "tool_execution_start", "tool_execution_end"]


def test_the_extension_is_silent_without_its_descriptor_or_its_reader(tmp_path: Path) -> None:
    assert extension(tmp_path, "", {}) == ("", [])
    # Named but closed: Pi goes on, nothing is written and nothing is raised.
    assert extension(tmp_path, "3>&-", {"IMPYARD_PI_EVENTS_FD": "3"})[1] == []
