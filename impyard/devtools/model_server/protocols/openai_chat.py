"""OpenAI chat completions (``POST …/chat/completions``, ``stream: true``): Server-Sent
Events of ``chat.completion.chunk``, then ``[DONE]``. Pi and OpenCode speak it, as do
OpenRouter, vLLM and Ollama."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

from impyard.devtools.model_server.script import Conversation, Reply, Tool
from impyard.devtools.model_server.wire import openai_models, pieces, sse


def offered_tools(body: dict[str, Any]) -> tuple[Tool, ...]:
    tools = []
    for entry in body.get("tools") or []:
        function = entry.get("function") if isinstance(entry, dict) else None
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            properties = (function.get("parameters") or {}).get("properties") or {}
            tools.append(Tool(function["name"], frozenset(properties)))
    return tuple(tools)


def chunks(reply: Reply, model: str) -> Iterator[dict[str, Any]]:
    """The ``chat.completion.chunk`` objects of one streamed reply."""
    ident = f"chatcmpl-{uuid.uuid4().hex[:12]}"
    created = int(time.time())

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": ident,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    yield chunk({"role": "assistant", "content": ""})
    for piece in pieces(reply.text, 7):
        yield chunk({"content": piece})
    for index, call in enumerate(reply.tool_calls):
        yield chunk(
            {
                "tool_calls": [
                    {
                        "index": index,
                        "id": f"call_{uuid.uuid4().hex[:10]}",
                        "type": "function",
                        "function": {"name": call.name, "arguments": ""},
                    }
                ]
            }
        )
        # Split mid-token, as providers do: the agent must join the pieces before parsing.
        for piece in pieces(json.dumps(call.arguments), 9):
            yield chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    yield chunk({}, "tool_calls" if reply.tool_calls else "stop")
    usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    yield {
        "id": ident,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [],
        "usage": usage,
    }


class OpenAIChat:
    name = "openai-chat"

    def is_model_call(self, method: str, path: str) -> bool:
        return method == "POST" and path.split("?", 1)[0].endswith("/chat/completions")

    def conversation(self, body: dict[str, Any], path: str) -> Conversation:
        return Conversation(list(body.get("messages") or []), offered_tools(body))

    def model(self, body: dict[str, Any], path: str) -> str:
        return str(body.get("model") or "")

    def stream(self, reply: Reply, model: str) -> Iterator[bytes]:
        for chunk in chunks(reply, model):
            yield sse(chunk)
        yield b"data: [DONE]\n\n"

    def error(self, status: int, message: str) -> dict[str, Any]:
        return {"error": {"message": message, "type": "scripted"}}

    def other(
        self, method: str, path: str, body: dict[str, Any], model: str
    ) -> tuple[int, Any] | None:
        return openai_models(method, path, model)


API = OpenAIChat()
