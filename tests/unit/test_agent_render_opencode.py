"""``box/agent-render`` with OpenCode's parser ``box/opencode/events.js``, run by the host's
node. A stand-in OpenCode prints canned events on stdout, in the shapes
``opencode run --format json`` (1.18.33) printed against a scripted model: a turn with
text and a shell call, a turn with a write and a failed read, an answer; and a model call
that failed for good. One bounded, escaped line per step, the turn's line before the
calls it made, the answer once, OpenCode's exit status kept."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

from tests.helpers.agent_render import needs_node, render_stand_in

pytestmark = needs_node()

SESSION = "ses_dbdfaf554ffelgyczCkR4ljuIi"


def event(kind: str, part: dict[str, Any]) -> dict[str, Any]:
    return {"type": kind, "timestamp": 1796403972216, "sessionID": SESSION, "part": part}


def step_start() -> dict[str, Any]:
    return event("step_start", {"id": "prt_1", "type": "step-start"})


def text(value: str) -> dict[str, Any]:
    return event("text", {"id": "prt_2", "type": "text", "text": value})


def tool_use(name: str, args: dict[str, Any], output: str = "", error: str = "") -> dict[str, Any]:
    state: dict[str, Any] = {"status": "error" if error else "completed", "input": args}
    if error:
        state["error"] = error
    else:
        state |= {"output": output, "metadata": {"output": output, "exit": 0}, "title": name}
    return event("tool_use", {"type": "tool", "tool": name, "callID": "call_0_0", "state": state})


def step_finish(reason: str, total: int) -> dict[str, Any]:
    tokens = {"total": total, "input": total - 20, "output": 20, "reasoning": 0}
    return event("step_finish", {"type": "step-finish", "reason": reason, "tokens": tokens})


ESC_TITLE, ESC_CLEAR = "\x1b]0;t\x07", "\x1b[2J"
SHOWN_TITLE, SHOWN_CLEAR = r"\x1b]0;t\x07", r"\x1b[2J"

NOTE = {"filePath": "/opt/impyard/knowledge/records/a.md", "content": "hello\n"}
SESSION_EVENTS = [
    step_start(),
    text(f"Let me look {ESC_CLEAR}first."),
    tool_use("bash", {"command": "ls", "description": "look"}, f"a{ESC_TITLE}\nb\n"),
    step_finish("tool-calls", 120),
    step_start(),
    tool_use("read", {"filePath": "/nope/missing.md"}, error="File not found: /nope/missing.md"),
    tool_use("write", NOTE, "Wrote file successfully."),
    step_finish("tool-calls", 121),
    step_start(),
    text(f"Done:\n\twrote one note {ESC_TITLE}."),
    step_finish("stop", 122),
]
FAILED = {
    "type": "error",
    "timestamp": 1796403593215,
    "sessionID": SESSION,
    "error": {
        "name": "APIError",
        "data": {
            "message": f"scripted provider outage {ESC_CLEAR}",
            "statusCode": 500,
            "isRetryable": True,
        },
    },
}


def render(tmp_path: Path, events: list[Any], then: str = "") -> subprocess.CompletedProcess[bytes]:
    """agent-render running a stand-in OpenCode that prints ``events`` then runs ``then``."""
    return render_stand_in(tmp_path, "opencode", events, f'cat "$0"; {then}')


def steps(out: bytes) -> list[str]:
    """The step lines, with the seconds a turn took (which vary) written as S."""
    lines = [line for line in out.decode().splitlines() if line.startswith("[opencode] ")]
    return [re.sub(r"\(\d+\.\d s, ", "(S s, ", line) for line in lines]


def test_each_turn_shows_before_its_calls_and_the_answer_comes_once_escaped(
    tmp_path: Path,
) -> None:
    done = render(tmp_path, SESSION_EVENTS)
    assert done.returncode == 0, done.stderr
    for raw in ("\x1b", "\x07"):
        assert raw.encode() not in done.stdout
    assert steps(done.stdout) == [
        "[opencode] model turn 1 (S s, 120 tokens): 1 tool call, says: "
        rf"Let me look {SHOWN_CLEAR}first.",
        "[opencode] tool bash: ls (+description)",
        rf"[opencode] result bash: 10 bytes, 2 lines: a{SHOWN_TITLE}",
        "[opencode] model turn 2 (S s, 121 tokens): 2 tool calls",
        "[opencode] tool read: /nope/missing.md",
        "[opencode] result read: failed, 32 bytes, 1 line: File not found: /nope/missing.md",
        # A call shows its main argument (OpenCode's filePath), then the others' names.
        "[opencode] tool write: /opt/impyard/knowledge/records/a.md (+content)",
        "[opencode] result write: 24 bytes, 1 line: Wrote file successfully.",
        "[opencode] model turn 3 (S s, 122 tokens): answered",
        "[opencode] answer after 3 model turns and 3 tool calls:",
    ]
    answer = done.stdout.decode().split("3 tool calls:\n", 1)[1]
    assert answer == f"Done:\n\twrote one note {SHOWN_TITLE}.\n"


def test_a_model_call_that_failed_for_good_is_an_error_step_and_the_status_kept(
    tmp_path: Path,
) -> None:
    done = render(tmp_path, [FAILED], then="exit 1")
    assert done.returncode == 1
    assert steps(done.stdout) == [
        f"[opencode] model turn 1 (no usage): error: 500 scripted provider outage {SHOWN_CLEAR}"
    ]
