"""OpenAI Responses (``POST …/responses``, ``stream: true``): Server-Sent Events named by
their ``type`` (``response.created``, ``response.output_item.added``, text and
function-call argument deltas, ``response.output_item.done``, ``response.completed`` with
the usage). Codex speaks it.

What Codex 0.171 sends (``codex exec`` against this server): one POST per model turn,
nothing else (no model list, no HEAD) once model discovery is off. The whole conversation
is in ``input`` on every request (``store: false``): ``message`` items (role
``developer`` for its base prompt and the configured ``developer_instructions``, ``user``
for the environment and the task), then per turn the model's ``message``,
``function_call`` (``exec_command`` with ``cmd``), ``custom_tool_call`` (``apply_patch``,
a freeform patch, offered only to models in Codex's own list) and ``reasoning`` items,
and the ``function_call_output`` / ``custom_tool_call_output`` items of their results.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

from impyard.devtools.model_server.script import Conversation, Reply, Tool
from impyard.devtools.model_server.wire import openai_models, pieces, sse

#: What the usage of every scripted reply says.
USAGE = {
    "input_tokens": 10,
    "input_tokens_details": {"cached_tokens": 0},
    "output_tokens": 5,
    "output_tokens_details": {"reasoning_tokens": 0},
    "total_tokens": 15,
}


def offered_tools(body: dict[str, Any]) -> tuple[Tool, ...]:
    """The function and custom (freeform) tools of a request, with their argument names."""
    tools = []
    for entry in body.get("tools") or []:
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            continue
        if entry.get("type") == "function":
            properties = (entry.get("parameters") or {}).get("properties") or {}
            tools.append(Tool(entry["name"], frozenset(properties)))
        elif entry.get("type") == "custom":
            tools.append(Tool(entry["name"]))
    return tuple(tools)


def messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    """A request's ``instructions`` and ``input`` items as OpenAI-chat messages: the
    calls of one model reply join the assistant message before them, so each reply is one
    assistant message (``Conversation.turn`` counts replies)."""
    out: list[dict[str, Any]] = []
    instructions = body.get("instructions")
    if isinstance(instructions, str) and instructions:
        out.append({"role": "system", "content": instructions})
    items = body.get("input")
    if isinstance(items, str):
        items = [{"type": "message", "role": "user", "content": items}]
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, dict):
            continue
        kind = item.get("type", "message")
        if kind == "message":
            out.append({"role": item.get("role", "user"), "content": item.get("content", "")})
        elif kind in ("function_call", "custom_tool_call"):
            arguments = item.get("arguments") if kind == "function_call" else item.get("input")
            call = {
                "id": item.get("call_id"),
                "type": "function",
                "function": {"name": item.get("name"), "arguments": arguments or ""},
            }
            last = out[-1] if out else None
            if last is not None and last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(call)
            else:
                out.append({"role": "assistant", "content": "", "tool_calls": [call]})
        elif kind in ("function_call_output", "custom_tool_call_output"):
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": item.get("call_id"),
                    "content": item.get("output", ""),
                }
            )
    return out


def events(reply: Reply, model: str) -> Iterator[dict[str, Any]]:
    """The events of one streamed reply: its text as one message item, then each tool
    call as a function_call item whose arguments arrive in pieces split mid-token."""
    ident = f"resp_{uuid.uuid4().hex[:16]}"
    response: dict[str, Any] = {
        "id": ident,
        "object": "response",
        "created_at": int(time.time()),
        "status": "in_progress",
        "model": model,
        "output": [],
    }
    yield {"type": "response.created", "response": dict(response)}
    yield {"type": "response.in_progress", "response": dict(response)}
    output: list[dict[str, Any]] = []
    if reply.text:
        item_id = f"msg_{uuid.uuid4().hex[:12]}"
        index = len(output)
        item: dict[str, Any] = {
            "type": "message",
            "id": item_id,
            "role": "assistant",
            "status": "in_progress",
            "content": [],
        }
        yield {"type": "response.output_item.added", "output_index": index, "item": item}
        part = {"type": "output_text", "text": "", "annotations": []}
        where = {"item_id": item_id, "output_index": index, "content_index": 0}
        yield {"type": "response.content_part.added", **where, "part": part}
        for piece in pieces(reply.text, 7):
            yield {"type": "response.output_text.delta", **where, "delta": piece}
        yield {"type": "response.output_text.done", **where, "text": reply.text}
        done_part = {**part, "text": reply.text}
        yield {"type": "response.content_part.done", **where, "part": done_part}
        item = {**item, "status": "completed", "content": [done_part]}
        yield {"type": "response.output_item.done", "output_index": index, "item": item}
        output.append(item)
    for call in reply.tool_calls:
        index = len(output)
        arguments = json.dumps(call.arguments)
        item = {
            "type": "function_call",
            "id": f"fc_{uuid.uuid4().hex[:12]}",
            "call_id": f"call_{uuid.uuid4().hex[:12]}",
            "name": call.name,
            "arguments": "",
            "status": "in_progress",
        }
        yield {"type": "response.output_item.added", "output_index": index, "item": item}
        where = {"item_id": item["id"], "output_index": index}
        # Split mid-token, as providers do: the agent must join the pieces before parsing.
        for piece in pieces(arguments, 9):
            yield {"type": "response.function_call_arguments.delta", **where, "delta": piece}
        yield {"type": "response.function_call_arguments.done", **where, "arguments": arguments}
        item = {**item, "arguments": arguments, "status": "completed"}
        yield {"type": "response.output_item.done", "output_index": index, "item": item}
        output.append(item)
    completed = {**response, "status": "completed", "output": output, "usage": USAGE}
    yield {"type": "response.completed", "response": completed}


class OpenAIResponses:
    name = "openai-responses"

    def is_model_call(self, method: str, path: str) -> bool:
        return method == "POST" and path.split("?", 1)[0].rstrip("/").endswith("/responses")

    def conversation(self, body: dict[str, Any], path: str) -> Conversation:
        return Conversation(messages(body), offered_tools(body))

    def model(self, body: dict[str, Any], path: str) -> str:
        return str(body.get("model") or "")

    def stream(self, reply: Reply, model: str) -> Iterator[bytes]:
        for number, event in enumerate(events(reply, model)):
            yield sse({**event, "sequence_number": number}, event["type"])

    def error(self, status: int, message: str) -> dict[str, Any]:
        return {"error": {"message": message, "type": "scripted", "param": None, "code": None}}

    def other(
        self, method: str, path: str, body: dict[str, Any], model: str
    ) -> tuple[int, Any] | None:
        return openai_models(method, path, model)


API = OpenAIResponses()
