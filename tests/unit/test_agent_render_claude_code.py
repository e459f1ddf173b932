"""``box/agent-render`` with Claude Code's parser ``box/claude-code/events.js``, run by the
host's node. A stand-in Claude Code prints canned events on stdout, in the shapes Claude
Code 2.1.197 prints with ``-p --output-format stream-json --verbose
--include-partial-messages`` (one ``assistant`` event per finished content block, the API's
own stream as ``stream_event``, a failed request as a ``<synthetic>`` message): one bounded
line per step as it happens, the answer from the ``result`` event, nothing raw from the
model or a tool, and Claude Code's exit status kept."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from tests.helpers.agent_render import needs_node, render_stand_in, step_lines

pytestmark = needs_node()

ESC_TITLE, ESC_CLEAR = "\x1b]0;pwned\x07", "\x1b[2J"
SHOWN_TITLE, SHOWN_CLEAR = r"\x1b]0;pwned\x07", r"\x1b[2J"
SESSION = "5f0c7a52-1d7e-4b59-9f3e-2a8c1f1e6b10"


def init() -> dict[str, Any]:
    return {
        "type": "system",
        "subtype": "init",
        "session_id": SESSION,
        "tools": ["Bash", "Write"],
        "model": "scripted-model",
        "permissionMode": "bypassPermissions",
        "claude_code_version": "2.1.197",
    }


def requesting() -> dict[str, Any]:
    return {"type": "system", "subtype": "status", "status": "requesting", "session_id": SESSION}


def stream(event: dict[str, Any], parent: str | None = None) -> dict[str, Any]:
    return {"type": "stream_event", "event": event, "parent_tool_use_id": parent}


def block_event(message_id: str, block: dict[str, Any], parent: str | None) -> dict[str, Any]:
    message = {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": "scripted-model",
        "content": [block],
        "stop_reason": None,
        "usage": {"input_tokens": 100, "output_tokens": 1},
    }
    return {"type": "assistant", "message": message, "parent_tool_use_id": parent}


def reply(
    message_id: str,
    *blocks: dict[str, Any],
    stop: str = "end_turn",
    output_tokens: int = 20,
    parent: str | None = None,
) -> list[dict[str, Any]]:
    """One model reply as Claude Code prints it: the request, the API's stream with each
    finished block's ``assistant`` event before its ``content_block_stop``, then the end."""
    start = {
        "type": "message_start",
        "message": {"id": message_id, "usage": {"input_tokens": 100, "output_tokens": 1}},
    }
    events = [requesting(), stream(start, parent)]
    for index, block in enumerate(blocks):
        opened = {**block, "input": {}} if block["type"] == "tool_use" else {**block, "text": ""}
        events.append(
            stream({"type": "content_block_start", "index": index, "content_block": opened}, parent)
        )
        events.append(block_event(message_id, block, parent))
        events.append(stream({"type": "content_block_stop", "index": index}, parent))
    delta = {
        "type": "message_delta",
        "delta": {"stop_reason": stop, "stop_sequence": None},
        "usage": {"output_tokens": output_tokens},
    }
    return [*events, stream(delta, parent), stream({"type": "message_stop"}, parent)]


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def tool_use(ident: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": ident, "name": name, "input": arguments}


def tool_result(ident: str, content: Any, error: bool = False) -> dict[str, Any]:
    part = {"tool_use_id": ident, "type": "tool_result", "content": content, "is_error": error}
    return {
        "type": "user",
        "message": {"role": "user", "content": [part]},
        "parent_tool_use_id": None,
        "session_id": SESSION,
    }


def result(answer: str, error: bool = False) -> dict[str, Any]:
    return {
        "type": "result",
        "subtype": "success",
        "is_error": error,
        "num_turns": 3,
        "result": answer,
        "session_id": SESSION,
    }


def failed_request(message: str) -> list[dict[str, Any]]:
    """A request that failed after Claude Code's retries: a retry notice, then the error as
    a ``<synthetic>`` assistant message (no stream), then an error result."""
    retry = {"type": "system", "subtype": "api_retry", "attempt": 1, "error_status": 500}
    synthetic = {
        "type": "assistant",
        "message": {
            "id": "2b7f7d0e-3a43-4f0e-9d55-0d6f0f7e2c11",
            "model": "<synthetic>",
            "role": "assistant",
            "stop_reason": "stop_sequence",
            "usage": {"input_tokens": 0, "output_tokens": 0},
            "content": [text(message)],
        },
        "parent_tool_use_id": None,
    }
    return [requesting(), retry, synthetic, result(message, error=True)]


def render(tmp_path: Path, events: list[Any], then: str = "") -> subprocess.CompletedProcess[bytes]:
    """agent-render running a stand-in Claude Code that prints ``events``, then ``then``."""
    return render_stand_in(tmp_path, "claude-code", events, f'cat "$0"; {then}')


def steps(out: bytes) -> list[str]:
    return step_lines(out, "claude-code")


NOTE = "/opt/impyard/knowledge/records/claude/a--n_0123456789ab_1.md"
SESSION_EVENTS = [
    init(),
    *reply(
        "msg_1",
        text(f"Let me look{ESC_CLEAR} \u202eevil"),
        tool_use("toolu_1", "Bash", command=f"echo {ESC_TITLE}\nls", description="List"),
        stop="tool_use",
    ),
    tool_result("toolu_1", f"out{ESC_TITLE}\nrecords\n"),
    *reply(
        "msg_2", tool_use("toolu_2", "Write", file_path=NOTE, content="x" * 500), stop="tool_use"
    ),
    tool_result("toolu_2", "EACCES: permission denied", error=True),
    *reply("msg_3", text("Done.")),
    result(f"Done:\n\tout{ESC_TITLE} {ESC_CLEAR}\x7f\n"),
]


def test_each_reply_tool_call_and_result_is_one_escaped_line_then_the_answer(
    tmp_path: Path,
) -> None:
    done = render(tmp_path, SESSION_EVENTS)
    assert done.returncode == 0, done.stderr
    lines = steps(done.stdout)
    assert [line.replace(" (0.0 s, ", " (") for line in lines] == [
        rf"[claude-code] model turn 1 (120 tokens): 1 tool call, says: Let me look{SHOWN_CLEAR} "
        r"\u202eevil",
        rf"[claude-code] tool Bash: echo {SHOWN_TITLE}\nls (+description)",
        rf"[claude-code] result Bash: 22 bytes, 2 lines: out{SHOWN_TITLE}",
        "[claude-code] model turn 2 (120 tokens): 1 tool call",
        f"[claude-code] tool Write: {NOTE} (+content)",
        "[claude-code] result Write: failed, 25 bytes, 1 line: EACCES: permission denied",
        "[claude-code] model turn 3 (120 tokens): answered",
        "[claude-code] answer after 3 model turns and 2 tool calls:",
    ]
    answer = done.stdout.decode().split(lines[-1] + "\n", 1)[1]
    assert answer == f"Done:\n\tout{SHOWN_TITLE} {SHOWN_CLEAR}\\x7f\n"
    for raw in ("\x1b", "\x07", "\u202e"):
        assert raw.encode() not in done.stdout + done.stderr


def test_a_tool_call_is_shown_when_its_reply_ends_before_the_tool_has_run(
    tmp_path: Path,
) -> None:
    """The call's line is out while the tool still runs: the stand-in stops there."""
    events = [
        init(),
        *reply("msg_1", tool_use("toolu_1", "Bash", command="sleep 600"), stop="tool_use"),
    ]
    done = render(tmp_path, events, then="exit 9")
    assert done.returncode == 9
    assert [line.replace(" (0.0 s, ", " (") for line in steps(done.stdout)] == [
        "[claude-code] model turn 1 (120 tokens): 1 tool call",
        "[claude-code] tool Bash: sleep 600",
    ]


def test_a_result_that_comes_before_its_reply_ends_is_shown_after_the_call_named(
    tmp_path: Path,
) -> None:
    """Claude Code may run a tool once its block is complete: a fast tool's result can
    come before the reply's last stream events (seen under gVisor)."""
    first = reply("msg_1", tool_use("toolu_1", "Read", file_path=NOTE), stop="tool_use")
    early = [*first[:-2], tool_result("toolu_1", "a note\n"), *first[-2:]]
    events = [init(), *early, *reply("msg_2", text("Done.")), result("Done.")]
    done = render(tmp_path, events)
    assert done.returncode == 0, done.stderr
    assert [line.replace(" (0.0 s, ", " (") for line in steps(done.stdout)] == [
        "[claude-code] model turn 1 (120 tokens): 1 tool call",
        f"[claude-code] tool Read: {NOTE}",
        "[claude-code] result Read: 7 bytes, 1 line: a note",
        "[claude-code] model turn 2 (120 tokens): answered",
        "[claude-code] answer after 2 model turns and 1 tool call:",
    ]


def test_a_failed_request_is_a_turn_with_its_error_and_the_exit_status_is_kept(
    tmp_path: Path,
) -> None:
    error = f"API Error: 500 scripted provider outage{ESC_CLEAR}"
    done = render(tmp_path, [init(), *failed_request(error)], then="exit 1")
    assert done.returncode == 1
    [line] = steps(done.stdout)
    shown = f"API Error: 500 scripted provider outage{SHOWN_CLEAR}"
    assert line.replace(" (0.0 s, ", " (") == f"[claude-code] model turn 1 (no usage): {shown}"


def test_a_cut_off_reply_says_so_and_image_results_are_counted(tmp_path: Path) -> None:
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA"}}
    events = [
        init(),
        *reply("msg_1", tool_use("toolu_1", "Read", file_path="/tmp/a.png"), stop="tool_use"),
        tool_result("toolu_1", [text("a picture"), image]),
        *reply("msg_2", text("Half an ans"), stop="max_tokens"),
        result("Half an ans"),
    ]
    lines = [line.replace(" (0.0 s, ", " (") for line in steps(render(tmp_path, events).stdout)]
    assert lines[2] == "[claude-code] result Read: 9 bytes, 1 line, 1 image: a picture"
    assert lines[3] == "[claude-code] model turn 2 (120 tokens): cut off"


def test_a_subagents_events_are_not_the_imps_turns(tmp_path: Path) -> None:
    events = [
        init(),
        *reply("msg_1", tool_use("toolu_1", "Task", prompt="look"), stop="tool_use"),
        *reply("msg_sub", tool_use("toolu_9", "Bash", command="ls"), parent="toolu_1"),
        tool_result("toolu_1", "looked"),
        *reply("msg_2", text("Done.")),
        result("Done."),
    ]
    lines = steps(render(tmp_path, events).stdout)
    assert lines[-1] == "[claude-code] answer after 2 model turns and 1 tool call:"
    assert not any("Bash" in line for line in lines)
