"""Pieces of streaming wire formats that several model APIs share."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any


def pieces(text: str, size: int) -> Iterator[str]:
    """``text`` in pieces of ``size`` characters: streamed text and tool-call arguments
    arrive split mid-token, as providers send them."""
    for start in range(0, len(text), size):
        yield text[start : start + size]


def sse(doc: Any, event: str | None = None) -> bytes:
    """One Server-Sent Event carrying ``doc`` as JSON (with an ``event:`` line if named)."""
    head = f"event: {event}\n".encode() if event else b""
    return head + b"data: " + json.dumps(doc).encode() + b"\n\n"


def openai_models(method: str, path: str, model: str) -> tuple[int, Any] | None:
    """The OpenAI APIs' model listing (``GET …/models``), offering ``model`` alone; None
    for any other request."""
    if method == "GET" and path.split("?", 1)[0].rstrip("/").endswith("/models"):
        return 200, {"object": "list", "data": [{"id": model, "object": "model"}]}
    return None
