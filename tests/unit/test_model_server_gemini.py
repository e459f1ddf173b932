"""The scripted model server's Gemini protocol: a request as the Gemini CLI 0.61 sends it
(``POST …/v1beta/models/<model>:streamGenerateContent?alt=sse``; texts and declarations
shortened) read as a conversation, and a reply answered as Gemini's Server-Sent Events,
over HTTP."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from impyard.devtools.model_server import Conversation, ModelServer, Reply, note_script

PATH = "/route/llm/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"


def declaration(name: str, *params: str) -> dict[str, Any]:
    schema = {"type": "object", "properties": {p: {"type": "string"} for p in params}}
    return {"name": name, "description": "…", "parametersJsonSchema": schema}


def call(ident: str, name: str, **args: Any) -> dict[str, Any]:
    return {"functionCall": {"id": ident, "args": args, "name": name}}


def response(ident: str, name: str, **answer: str) -> dict[str, Any]:
    return {"functionResponse": {"name": name, "response": answer, "id": ident}}


OUTPUT = "<untrusted_context>\nOutput: ns=n_0123456789ab\n</untrusted_context>"
REQUEST: dict[str, Any] = {
    "contents": [
        {
            "role": "user",
            "parts": [{"text": "<session_context>…</session_context>"}, {"text": "Write a note"}],
        },
        {
            "role": "model",
            "parts": [
                {"text": "Let me look."},
                {**call("sh_0", "run_shell_command", command="echo hi"), "thoughtSignature": "s"},
                call("sh_1", "run_shell_command", command="echo ns=$NS"),
            ],
        },
        {
            "role": "user",
            "parts": [
                response("sh_0", "run_shell_command", output="hi"),
                response("sh_1", "run_shell_command", output=OUTPUT),
            ],
        },
    ],
    "systemInstruction": {"role": "user", "parts": [{"text": "You are a CLI agent."}]},
    "tools": [
        {
            "functionDeclarations": [
                declaration("read_file", "file_path", "start_line"),
                declaration("write_file", "file_path", "content"),
                declaration("run_shell_command", "command", "description", "dir_path"),
            ]
        }
    ],
    "generationConfig": {"temperature": 1},
}


def post(url: str, body: dict[str, Any]) -> tuple[int, str, bytes]:
    request = urllib.request.Request(
        url + PATH, json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.headers["Content-Type"], answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers["Content-Type"], error.read()


def events(stream: bytes) -> list[dict[str, Any]]:
    chunks = stream.decode().split("\n\n")
    assert chunks[-1] == ""
    assert all(chunk.startswith("data: ") for chunk in chunks[:-1])
    return [json.loads(chunk.removeprefix("data: ")) for chunk in chunks[:-1]]


def parts(chunk: dict[str, Any]) -> list[dict[str, Any]]:
    return list(chunk["candidates"][0]["content"]["parts"])


def test_a_request_reads_as_the_conversation_with_its_calls_results_and_tools() -> None:
    seen: list[Conversation] = []

    def script(conversation: Conversation) -> Reply:
        seen.append(conversation)
        return Reply.say("ok")

    with ModelServer(script, protocol="gemini") as server:
        status, _, _ = post(server.url, REQUEST)
    assert status == 200
    (conversation,) = seen
    assert conversation.system() == "You are a CLI agent."
    assert conversation.user() == "<session_context>…</session_context>Write a note"
    assert conversation.turn == 1
    assert conversation.tool_results() == ["hi", OUTPUT]
    roles = [m["role"] for m in conversation.messages]
    assert roles == ["system", "user", "assistant", "tool", "tool"]
    assert conversation.messages[2]["content"] == "Let me look."
    assert [c["function"]["name"] for c in conversation.messages[2]["tool_calls"]] == [
        "run_shell_command",
        "run_shell_command",
    ]
    shell, write = conversation.tool("shell"), conversation.tool("write")
    assert shell is not None and shell.name == "run_shell_command" and "command" in shell.params
    assert write is not None and write.name == "write_file" and "file_path" in write.params
    # The request names its model in the path.
    assert server.turns()[0].path == PATH


def test_a_reply_streams_text_in_pieces_then_each_call_whole_in_a_chunk_of_its_own() -> None:
    # The note script's second turn: the namespace from the shell's output, a note written
    # with the CLI's own write tool and its argument names.
    with ModelServer(note_script(topic="gemini"), protocol="gemini") as server:
        status, kind, body = post(server.url, REQUEST)
    assert (status, kind) == (200, "text/event-stream")
    chunks = events(body)
    (write,) = [p["functionCall"] for c in chunks for p in parts(c) if "functionCall" in p]
    assert write["name"] == "write_file"
    path = "/opt/impyard/knowledge/records/gemini/first-note--n_0123456789ab_1.md"
    assert write["args"]["file_path"] == path
    assert write["args"]["content"].startswith("---\nid: n_0123456789ab_1\n")
    assert all(len(parts(c)) == 1 for c in chunks)
    assert [c["candidates"][0].get("finishReason") for c in chunks][-1] == "STOP"
    assert "usageMetadata" in chunks[-1]

    with ModelServer(lambda _: Reply.say("Wrote one note."), protocol="gemini") as server:
        _, _, body = post(server.url, REQUEST)
    texts = [p["text"] for c in events(body) for p in parts(c)]
    assert len(texts) > 1 and "".join(texts) == "Wrote one note."


def test_a_scripted_failure_is_answered_in_geminis_error_shape() -> None:
    with ModelServer(lambda _: Reply.error(500), protocol="gemini") as server:
        status, kind, body = post(server.url, REQUEST)
    assert (status, kind) == (500, "application/json")
    assert json.loads(body) == {
        "error": {"code": 500, "message": "scripted failure", "status": "INTERNAL"}
    }
