"""``box/agent-render`` with the Gemini CLI's parser ``box/gemini/events.js``, run by the
host's node. A stand-in CLI prints events the Gemini CLI 0.61 printed with
``--output-format stream-json`` against a scripted model (timestamps and ids shortened):
model turns are found from the order of its events (it marks none), one bounded line per
step, the last turn's text is the answer, a model failure is a step and the CLI's exit
status is kept."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from tests.helpers.agent_render import needs_node, render_stand_in, step_lines

pytestmark = needs_node()

ESC_CLEAR, SHOWN_CLEAR = "\x1b[2J", r"\x1b[2J"


def init() -> list[dict[str, Any]]:
    return [
        {"type": "init", "session_id": "6381110e", "model": "gemini-2.5-flash"},
        {"type": "message", "role": "user", "content": "Write one note\n"},
    ]


def said(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "assistant", "content": text, "delta": True}


def use(ident: str, name: str, **parameters: Any) -> dict[str, Any]:
    return {"type": "tool_use", "tool_name": name, "tool_id": ident, "parameters": parameters}


def result(ident: str, output: str, *, failed: bool = False) -> dict[str, Any]:
    event: dict[str, Any] = {
        "type": "tool_result",
        "tool_id": ident,
        "status": "error" if failed else "success",
        "output": output,
    }
    if failed:
        event["error"] = {"type": "invalid_tool_params", "message": output}
    return event


STATS = {"total_tokens": 45, "input_tokens": 30, "output_tokens": 15, "tool_calls": 3}
OUTSIDE = 'Path not in workspace: Attempted path "/tmp/w/note.md" resolves outside'

# Two calls in one turn (the CLI prints every tool_use of a turn before running any),
# a failed call, then an answer in two pieces.
SESSION = [
    *init(),
    said(f"Let me look.{ESC_CLEAR}"),
    use("sh_0", "run_shell_command", command="echo hi; id", description="x"),
    use("sh_1", "run_shell_command", command="echo two"),
    result("sh_0", "hi\nuid=65534(nobody) gid=65534(nogroup)"),
    result("sh_1", "two"),
    use("wf_0", "write_file", file_path="/tmp/w/note.md", content="hello\n"),
    result("wf_0", OUTSIDE, failed=True),
    said("All "),
    said("done."),
    {"type": "result", "status": "success", "stats": STATS},
]

API_ERROR = '[API Error: {"error":{"code":500,"message":"scripted failure","status":"INTERNAL"}}]'
FAILED = [
    *init(),
    {
        "type": "result",
        "status": "error",
        "error": {"type": "unknown", "message": API_ERROR},
        "stats": {**STATS, "total_tokens": 0, "tool_calls": 0},
    },
]


def render(
    tmp_path: Path, events: list[Any], status: int = 0
) -> subprocess.CompletedProcess[bytes]:
    """agent-render running a stand-in CLI that prints ``events`` and exits ``status``."""
    return render_stand_in(tmp_path, "gemini", events, f'cat "$0"; exit {status}')


def steps(out: bytes) -> list[str]:
    return step_lines(out, "gemini")


def test_turns_calls_and_results_are_one_line_each_and_the_last_text_is_the_answer(
    tmp_path: Path,
) -> None:
    done = render(tmp_path, SESSION)
    assert done.returncode == 0, done.stderr
    assert ESC_CLEAR.encode() not in done.stdout
    assert steps(done.stdout) == [
        f"[gemini] model turn 1 (0.0 s, no usage): 2 tool calls, says: Let me look.{SHOWN_CLEAR}",
        "[gemini] tool run_shell_command: echo hi; id (+description)",
        "[gemini] tool run_shell_command: echo two",
        "[gemini] result run_shell_command: 39 bytes, 2 lines: hi",
        "[gemini] result run_shell_command: 3 bytes, 1 line: two",
        "[gemini] model turn 2 (0.0 s, no usage): 1 tool call",
        "[gemini] tool write_file: /tmp/w/note.md (+content)",
        f"[gemini] result write_file: failed, {len(OUTSIDE)} bytes, 1 line: {OUTSIDE}",
        "[gemini] model turn 3 (0.0 s, no usage): answered",
        "[gemini] answer after 3 model turns and 3 tool calls:",
    ]
    assert done.stdout.decode().endswith("tool calls:\nAll done.\n")


def test_a_model_failure_is_the_turns_step_with_no_answer_and_the_exit_status_kept(
    tmp_path: Path,
) -> None:
    done = render(tmp_path, FAILED, status=1)
    assert done.returncode == 1
    assert steps(done.stdout) == [f"[gemini] model turn 1 (0.0 s, no usage): error: {API_ERROR}"]
    assert "answer" not in done.stdout.decode()


def test_a_turn_that_ends_the_run_without_a_word_is_said_nothing(tmp_path: Path) -> None:
    done = render(tmp_path, [*init(), {"type": "result", "status": "success", "stats": STATS}])
    assert steps(done.stdout) == ["[gemini] model turn 1 (0.0 s, no usage): said nothing"]
