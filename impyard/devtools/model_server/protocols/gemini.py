"""The Gemini API (``POST …/v1beta/models/<model>:streamGenerateContent?alt=sse``):
Server-Sent Events, each a whole ``GenerateContentResponse`` with the next parts of
``candidates[0].content``; the last carries ``finishReason`` and ``usageMetadata``. The
Gemini CLI speaks it.

Text arrives split across chunks; a ``functionCall`` part arrives whole (Gemini never
splits one) in a chunk of its own, its ``args`` a JSON object. The CLI 0.61 sends only
streamed model calls (with ``--model`` it asks no router); ``:countTokens`` is answered in
case a version counts first.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from impyard.devtools.model_server.script import Conversation, Reply, Tool
from impyard.devtools.model_server.wire import pieces, sse

_STATUS = {400: "INVALID_ARGUMENT", 404: "NOT_FOUND", 429: "RESOURCE_EXHAUSTED"}


def offered_tools(body: dict[str, Any]) -> tuple[Tool, ...]:
    tools = []
    for entry in body.get("tools") or []:
        declarations = entry.get("functionDeclarations") if isinstance(entry, dict) else None
        for declaration in declarations or []:
            if not isinstance(declaration, dict) or not isinstance(declaration.get("name"), str):
                continue
            schema = declaration.get("parametersJsonSchema") or declaration.get("parameters")
            properties = (schema or {}).get("properties") or {}
            tools.append(Tool(declaration["name"], frozenset(properties)))
    return tuple(tools)


def _text(parts: list[Any]) -> str:
    return "".join(
        str(part["text"])
        for part in parts
        if isinstance(part, dict) and isinstance(part.get("text"), str) and not part.get("thought")
    )


def _tool_message(response: dict[str, Any]) -> dict[str, Any]:
    """A ``functionResponse`` part as an OpenAI chat ``tool`` message."""
    answer = response.get("response")
    if isinstance(answer, dict) and isinstance(answer.get("output"), str):
        content = answer["output"]
    elif isinstance(answer, dict) and isinstance(answer.get("error"), str):
        content = answer["error"]
    else:
        content = json.dumps(answer)
    return {"role": "tool", "tool_call_id": str(response.get("id", "")), "content": content}


def messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The request's system instruction and contents as OpenAI chat messages."""
    out: list[dict[str, Any]] = []
    system = body.get("systemInstruction")
    if isinstance(system, dict):
        out.append({"role": "system", "content": _text(system.get("parts") or [])})
    for content in body.get("contents") or []:
        if not isinstance(content, dict):
            continue
        parts = [part for part in content.get("parts") or [] if isinstance(part, dict)]
        if content.get("role") == "model":
            calls = [
                {
                    "id": str(part["functionCall"].get("id", "")),
                    "type": "function",
                    "function": {
                        "name": part["functionCall"].get("name", ""),
                        "arguments": json.dumps(part["functionCall"].get("args") or {}),
                    },
                }
                for part in parts
                if isinstance(part.get("functionCall"), dict)
            ]
            message: dict[str, Any] = {"role": "assistant", "content": _text(parts)}
            if calls:
                message["tool_calls"] = calls
            out.append(message)
            continue
        for part in parts:
            if isinstance(part.get("functionResponse"), dict):
                out.append(_tool_message(part["functionResponse"]))
        text = _text(parts)
        if text:
            out.append({"role": "user", "content": text})
    return out


def chunks(reply: Reply, model: str) -> Iterator[dict[str, Any]]:
    """The ``GenerateContentResponse`` chunks of one streamed reply."""
    parts: list[dict[str, Any]] = [{"text": piece} for piece in pieces(reply.text, 7)]
    parts += [{"functionCall": {"name": c.name, "args": c.arguments}} for c in reply.tool_calls]
    if not parts:
        parts = [{"text": ""}]
    for index, part in enumerate(parts):
        candidate: dict[str, Any] = {"content": {"role": "model", "parts": [part]}, "index": 0}
        chunk: dict[str, Any] = {"candidates": [candidate], "modelVersion": model}
        if index == len(parts) - 1:
            candidate["finishReason"] = "STOP"
            chunk["usageMetadata"] = {
                "promptTokenCount": 10,
                "candidatesTokenCount": 5,
                "totalTokenCount": 15,
            }
        yield chunk


class Gemini:
    name = "gemini"

    def is_model_call(self, method: str, path: str) -> bool:
        return method == "POST" and path.split("?", 1)[0].endswith(":streamGenerateContent")

    def conversation(self, body: dict[str, Any], path: str) -> Conversation:
        return Conversation(messages(body), offered_tools(body))

    def model(self, body: dict[str, Any], path: str) -> str:
        # …/models/<model>:streamGenerateContent: the model is in the path, not the body.
        head = path.split("?", 1)[0].rsplit("/models/", 1)
        return head[1].split(":", 1)[0] if len(head) == 2 else ""

    def stream(self, reply: Reply, model: str) -> Iterator[bytes]:
        for chunk in chunks(reply, model):
            yield sse(chunk)

    def error(self, status: int, message: str) -> dict[str, Any]:
        code = _STATUS.get(status, "INTERNAL" if status >= 500 else "FAILED_PRECONDITION")
        return {"error": {"code": status, "message": message, "status": code}}

    def other(
        self, method: str, path: str, body: dict[str, Any], model: str
    ) -> tuple[int, Any] | None:
        route = path.split("?", 1)[0]
        if method == "POST" and route.endswith(":countTokens"):
            return 200, {"totalTokens": len(json.dumps(body)) // 4}
        if method == "GET" and route.rstrip("/").endswith("/models"):
            return 200, {"models": [{"name": f"models/{model}"}]}
        return None


API = Gemini()
