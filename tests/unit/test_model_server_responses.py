"""The scripted model server over the OpenAI Responses API (``--protocol
openai-responses``), as Codex calls it: a request shaped like Codex 0.171's (developer
prompts, the task, the model's earlier calls and their outputs) reaches the script as a
conversation, and the reply streams back as Responses events with the call's arguments
split across deltas."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from impyard.devtools.model_server import Conversation, ModelServer, Reply, shell_call


def text(role: str, value: str) -> dict[str, Any]:
    kind = "output_text" if role == "assistant" else "input_text"
    return {"type": "message", "role": role, "content": [{"type": kind, "text": value}]}


def call(call_id: str, arguments: str) -> dict[str, Any]:
    return {
        "type": "function_call",
        "name": "exec_command",
        "arguments": arguments,
        "call_id": call_id,
    }


EXEC_COMMAND = {
    "type": "function",
    "name": "exec_command",
    "parameters": {"type": "object", "properties": {"cmd": {}, "workdir": {}}},
}
APPLY_PATCH = {"type": "custom", "name": "apply_patch", "format": {"type": "grammar"}}
# The second request of a Codex task: one reply (text and two calls) and both outputs.
REQUEST = {
    "model": "gpt-5.5",
    "stream": True,
    "store": False,
    "tools": [EXEC_COMMAND, APPLY_PATCH, {"type": "web_search"}],
    "input": [
        text("developer", "You are a coding agent running in the Codex CLI."),
        text("developer", "# Impyard box contract"),
        text("user", "<environment_context>…</environment_context>"),
        text("user", "Write one note."),
        {"type": "reasoning", "id": "rs_1", "summary": []},
        text("assistant", "Let me look."),
        call("c1", '{"cmd":"ls"}'),
        call("c2", '{"cmd":"id"}'),
        {"type": "function_call_output", "call_id": "c1", "output": "records\n"},
        {"type": "function_call_output", "call_id": "c2", "output": "uid=65532(imp)\n"},
    ],
}


def post(url: str, body: dict[str, Any]) -> tuple[int, str]:
    request = urllib.request.Request(
        f"{url}/route/llm/v1/responses",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def sse_events(stream: str) -> list[tuple[str, dict[str, Any]]]:
    events = []
    for block in stream.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines())
        events.append((lines["event"], json.loads(lines["data"])))
    return events


def test_a_codex_request_is_a_conversation_and_the_call_streams_back_in_pieces() -> None:
    seen: list[Conversation] = []

    def script(conversation: Conversation) -> Reply:
        seen.append(conversation)
        return shell_call(conversation, "echo ns=$IMPYARD_KNOWLEDGE_NAMESPACE")

    with ModelServer(script, protocol="openai-responses") as server:
        status, stream = post(server.url, REQUEST)
    assert status == 200
    (conversation,) = seen
    assert conversation.turn == 1  # one reply so far, however many calls it made
    assert conversation.tool_results() == ["records\n", "uid=65532(imp)\n"]
    assert "# Impyard box contract" in conversation.system()
    assert "Write one note." in conversation.user()
    assert [tool.name for tool in conversation.tools] == ["exec_command", "apply_patch"]

    events = sse_events(stream)
    assert [name for name, _ in events] == [doc["type"] for _, doc in events]
    assert events[0][0] == "response.created" and events[-1][0] == "response.completed"
    deltas = [d["delta"] for n, d in events if n == "response.function_call_arguments.delta"]
    assert len(deltas) > 1
    (done,) = [d["item"] for n, d in events if n == "response.output_item.done"]
    assert done["type"] == "function_call" and done["name"] == "exec_command"
    assert "".join(deltas) == done["arguments"]
    assert json.loads(done["arguments"]) == {"cmd": "echo ns=$IMPYARD_KNOWLEDGE_NAMESPACE"}
    completed = events[-1][1]["response"]
    assert completed["output"] == [done] and completed["usage"]["total_tokens"] > 0


def test_text_streams_as_a_message_and_an_error_has_the_apis_shape() -> None:
    with ModelServer(lambda c: Reply.say("Wrote one note."), protocol="openai-responses") as ok:
        _, stream = post(ok.url, REQUEST)
    events = sse_events(stream)
    deltas = [d["delta"] for n, d in events if n == "response.output_text.delta"]
    assert "".join(deltas) == "Wrote one note."
    (done,) = [d["item"] for n, d in events if n == "response.output_item.done"]
    assert done["content"][0]["text"] == "Wrote one note."

    failing = ModelServer(lambda c: Reply.error(500, "outage"), protocol="openai-responses")
    with failing:
        status, body = post(failing.url, REQUEST)
    assert status == 500
    assert json.loads(body)["error"]["message"] == "outage"
