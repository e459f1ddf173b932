"""Anthropic messages (``POST …/v1/messages``, ``stream: true``): Server-Sent Events
``message_start``, per content block ``content_block_start``, ``content_block_delta``
(``text_delta``; ``input_json_delta`` with a tool call's arguments split mid-token) and
``content_block_stop``, then ``message_delta`` (``stop_reason`` ``tool_use`` or
``end_turn``, output usage) and ``message_stop``; an error is
``{"type": "error", "error": {...}}``. Claude Code speaks it: it posts to
``<base>/v1/messages?beta=true``, may send ``HEAD <base>`` first when it reaches the base
without a proxy, and counts tokens at ``…/v1/messages/count_tokens``."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

from impyard.devtools.model_server.script import Conversation, Reply, Tool
from impyard.devtools.model_server.wire import pieces, sse

USAGE = {"input_tokens": 10, "output_tokens": 5}


def _path(path: str) -> str:
    return path.split("?", 1)[0].rstrip("/")


def offered_tools(body: dict[str, Any]) -> tuple[Tool, ...]:
    tools = []
    for entry in body.get("tools") or []:
        if isinstance(entry, dict) and isinstance(entry.get("name"), str):
            schema = entry.get("input_schema")
            properties = schema.get("properties") if isinstance(schema, dict) else None
            tools.append(Tool(entry["name"], frozenset(properties or {})))
    return tuple(tools)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(part.get("text", ""))
            for part in content
            if isinstance(part, dict) and part.get("type") == "text"
        )
    return ""


def _message(message: dict[str, Any]) -> list[dict[str, Any]]:
    """One Anthropic message as OpenAI-chat messages: a user's tool results become
    ``tool`` messages, an assistant's ``tool_use`` blocks its ``tool_calls``."""
    role, content = message.get("role"), message.get("content")
    parts = content if isinstance(content, list) else [{"type": "text", "text": content}]
    parts = [part for part in parts if isinstance(part, dict)]
    if role == "assistant":
        calls = [
            {
                "id": part.get("id"),
                "type": "function",
                "function": {"name": part.get("name"), "arguments": json.dumps(part.get("input"))},
            }
            for part in parts
            if part.get("type") == "tool_use"
        ]
        shaped: dict[str, Any] = {"role": "assistant", "content": _text(parts)}
        if calls:
            shaped["tool_calls"] = calls
        return [shaped]
    out: list[dict[str, Any]] = [
        {
            "role": "tool",
            "tool_call_id": part.get("tool_use_id"),
            "content": _text(part.get("content")),
        }
        for part in parts
        if part.get("type") == "tool_result"
    ]
    text = _text(parts)
    if text:
        out.append({"role": "user", "content": text})
    return out


def messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The request's system prompt and messages in the OpenAI chat shape."""
    shaped: list[dict[str, Any]] = []
    system = _text(body.get("system"))
    if system:
        shaped.append({"role": "system", "content": system})
    for message in body.get("messages") or []:
        if isinstance(message, dict):
            shaped += _message(message)
    return shaped


def _block(
    index: int, content: dict[str, Any], deltas: Iterator[dict[str, Any]]
) -> Iterator[tuple[str, dict[str, Any]]]:
    """One content block's events: its start, one event per delta, its stop."""
    start = {"type": "content_block_start", "index": index, "content_block": content}
    yield "content_block_start", start
    for delta in deltas:
        yield "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
    yield "content_block_stop", {"type": "content_block_stop", "index": index}


def events(reply: Reply, model: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """The (event name, data) pairs of one streamed reply."""
    message: dict[str, Any] = {
        "id": f"msg_{uuid.uuid4().hex[:24]}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": USAGE["input_tokens"], "output_tokens": 1},
    }
    yield "message_start", {"type": "message_start", "message": message}
    index = 0
    if reply.text:
        texts = ({"type": "text_delta", "text": piece} for piece in pieces(reply.text, 7))
        yield from _block(index, {"type": "text", "text": ""}, texts)
        index += 1
    for call in reply.tool_calls:
        block = {
            "type": "tool_use",
            "id": f"toolu_{uuid.uuid4().hex[:24]}",
            "name": call.name,
            "input": {},
        }
        # Split mid-token, as the API does: the agent must join the pieces before parsing.
        arguments = pieces(json.dumps(call.arguments), 9)
        parts = ({"type": "input_json_delta", "partial_json": piece} for piece in arguments)
        yield from _block(index, block, parts)
        index += 1
    stop = "tool_use" if reply.tool_calls else "end_turn"
    yield (
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop, "stop_sequence": None},
            "usage": {"output_tokens": USAGE["output_tokens"]},
        },
    )
    yield "message_stop", {"type": "message_stop"}


class AnthropicMessages:
    name = "anthropic"

    def is_model_call(self, method: str, path: str) -> bool:
        return method == "POST" and _path(path).endswith("/v1/messages")

    def conversation(self, body: dict[str, Any], path: str) -> Conversation:
        return Conversation(messages(body), offered_tools(body))

    def model(self, body: dict[str, Any], path: str) -> str:
        return str(body.get("model") or "")

    def stream(self, reply: Reply, model: str) -> Iterator[bytes]:
        for name, data in events(reply, model):
            yield sse(data, name)

    def error(self, status: int, message: str) -> dict[str, Any]:
        kind = {400: "invalid_request_error", 404: "not_found_error", 429: "rate_limit_error"}
        return {
            "type": "error",
            "error": {"type": kind.get(status, "api_error"), "message": message},
        }

    def other(
        self, method: str, path: str, body: dict[str, Any], model: str
    ) -> tuple[int, Any] | None:
        route = _path(path)
        if method == "HEAD":
            # Claude Code's reachability check of its base URL.
            return 200, {}
        if method == "POST" and route.endswith("/v1/messages/count_tokens"):
            return 200, {"input_tokens": USAGE["input_tokens"]}
        if method == "GET" and route.endswith("/v1/models"):
            entry = {"type": "model", "id": model, "display_name": model}
            return 200, {"data": [entry], "has_more": False, "first_id": model, "last_id": model}
        return None


API = AnthropicMessages()
