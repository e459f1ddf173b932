"""``box/agent-render`` with Codex's parser ``box/codex/events.js``, run by the host's node.
A stand-in Codex prints canned events on stdout, in the shapes ``codex exec --json``
0.171.0 printed against the scripted Responses server: one bounded line per model turn,
tool call and result, then the answer; a failed model call is a step and Codex's exit
status is the box's."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from tests.helpers.agent_render import needs_node, render_stand_in, step_lines

pytestmark = needs_node()

ESC_TITLE, SHOWN_TITLE = "\x1b]0;pwned\x07", r"\x1b]0;pwned\x07"


def item(event: str, ident: str, kind: str, **fields: Any) -> dict[str, Any]:
    return {"type": f"item.{event}", "item": {"id": ident, "type": kind, **fields}}


def command(ident: str, cmd: str, output: str, code: int) -> list[dict[str, Any]]:
    started = {"command": cmd, "aggregated_output": "", "exit_code": None}
    status = "completed" if code == 0 else "failed"
    done = {"command": cmd, "aggregated_output": output, "exit_code": code}
    return [
        item("started", ident, "command_execution", **started, status="in_progress"),
        item("completed", ident, "command_execution", **done, status=status),
    ]


def patch(ident: str, path: str) -> list[dict[str, Any]]:
    changes = [{"path": path, "kind": "add"}]
    return [
        item("started", ident, "file_change", changes=changes, status="in_progress"),
        item("completed", ident, "file_change", changes=changes, status="completed"),
    ]


NOTE = "/opt/impyard/knowledge/records/codex/n1.md"
START = [{"type": "thread.started", "thread_id": "01a241fe"}, {"type": "turn.started"}]
USAGE = {"input_tokens": 409, "cached_input_tokens": 40, "output_tokens": 80}

# Text and two calls in one reply, an apply_patch, a failing command, then the answer.
SESSION = [
    *START,
    item("completed", "item_0", "reasoning", text="**Thinking** about notes"),
    item("completed", "item_1", "agent_message", text="Let me look around first."),
    *command("item_2", "/usr/bin/bash -c 'ls -la'", f"total 8{ESC_TITLE}\n.\n", 0),
    *command("item_3", "/usr/bin/bash -c \"printf 'a\\\\nb\\\\n'\"", "a\nb\n", 0),
    *patch("item_4", NOTE),
    *command("item_5", "/usr/bin/bash -c 'echo oops >&2; exit 3'", "oops\n", 3),
    item("completed", "item_6", "agent_message", text="Done: wrote\n\trecords/codex/n1.md"),
    {"type": "turn.completed", "usage": USAGE},
]

HIGH_DEMAND = "We\u2019re currently experiencing high demand, which may cause temporary errors."
# What Codex prints when the model answers 500 (with no retries left).
FAILED = [
    *START,
    {"type": "error", "message": HIGH_DEMAND},
    {"type": "turn.failed", "error": {"message": HIGH_DEMAND}},
]
# A reply cut at the model's output limit (response.incomplete, max_output_tokens).
CUT_OFF = [
    *START,
    item("completed", "item_0", "agent_message", text="partial answ"),
    {"type": "error", "message": "Incomplete response returned, reason: max_output_tokens"},
    {
        "type": "turn.failed",
        "error": {"message": "Incomplete response returned, reason: max_output_tokens"},
    },
]


def render(tmp_path: Path, events: list[Any], then: str = "") -> subprocess.CompletedProcess[bytes]:
    """agent-render running a stand-in Codex that prints ``events`` on stdout."""
    return render_stand_in(tmp_path, "codex", events, f'cat "$0"; {then}')


def steps(out: bytes) -> list[str]:
    return step_lines(out, "codex")


def test_each_reply_call_and_result_is_one_line_then_the_answer(tmp_path: Path) -> None:
    done = render(tmp_path, SESSION)
    assert done.returncode == 0, done.stderr
    assert ESC_TITLE.encode() not in done.stdout
    lines = steps(done.stdout)
    assert lines == [
        "[codex] model turn 1 (0.0 s, no usage): 1 tool call, says: Let me look around first.",
        # The command as the model wrote it, out of Codex's `bash -c '…'`.
        "[codex] tool exec_command: ls -la",
        rf"[codex] result exec_command: 20 bytes, 2 lines: total 8{SHOWN_TITLE}",
        # The reply's second call: Codex runs calls one by one and marks no reply.
        "[codex] model turn 2 (0.0 s, no usage): 1 tool call",
        r"[codex] tool exec_command: printf 'a\nb\n'",
        "[codex] result exec_command: 4 bytes, 2 lines: a",
        "[codex] model turn 3 (0.0 s, no usage): 1 tool call",
        f"[codex] tool apply_patch: add {NOTE}",
        f"[codex] result apply_patch: 46 bytes, 1 line: add {NOTE}",
        "[codex] model turn 4 (0.0 s, no usage): 1 tool call",
        "[codex] tool exec_command: echo oops >&2; exit 3",
        "[codex] result exec_command: failed, 5 bytes, 1 line: oops",
        "[codex] model turn 5 (0.0 s, no usage): answered",
        "[codex] answer after 5 model turns and 4 tool calls:",
    ]
    # The answer in full after the last step, newlines and tabs kept.
    answer = done.stdout.decode().split(lines[-1] + "\n", 1)[1]
    assert answer == "Done: wrote\n\trecords/codex/n1.md\n"


def test_a_failed_model_call_is_a_step_and_codexs_exit_status_is_kept(tmp_path: Path) -> None:
    done = render(tmp_path, FAILED, then="exit 1")
    assert done.returncode == 1
    assert steps(done.stdout) == [f"[codex] model turn 1 (0.0 s, no usage): {HIGH_DEMAND}"]


def test_a_reply_cut_at_the_output_limit_says_so(tmp_path: Path) -> None:
    done = render(tmp_path, CUT_OFF, then="exit 1")
    assert done.returncode == 1
    assert steps(done.stdout) == ["[codex] model turn 1 (0.0 s, no usage): cut off"]
