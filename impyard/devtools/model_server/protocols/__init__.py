"""The model APIs the scripted server speaks, one module each, by name.

A protocol turns its API's request into a protocol-neutral ``Conversation`` and a
``Reply`` into the bytes of its API's streaming answer; everything else (the script, the
record of what was received, errors, hangs) is the server's.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

from impyard.devtools.model_server.protocols import (
    anthropic,
    gemini,
    openai_chat,
    openai_responses,
)
from impyard.devtools.model_server.script import Conversation, Reply


class ModelApi(Protocol):
    #: ``--protocol`` name.
    name: str

    def is_model_call(self, method: str, path: str) -> bool:
        """Whether a request is one the script answers (a model turn)."""

    def conversation(self, body: dict[str, Any], path: str) -> Conversation: ...

    def model(self, body: dict[str, Any], path: str) -> str:
        """The model the request asks for ('' when it names none)."""

    def stream(self, reply: Reply, model: str) -> Iterator[bytes]:
        """The body of a streamed 200 answer (Server-Sent Events), piece by piece."""

    def error(self, status: int, message: str) -> dict[str, Any]:
        """The JSON body of an error answer, in the API's own shape."""

    def other(
        self, method: str, path: str, body: dict[str, Any], model: str
    ) -> tuple[int, Any] | None:
        """An answer to a request that is not a model turn (a model list, a HEAD of the
        base, a token count), or None for 404."""


PROTOCOLS: dict[str, ModelApi] = {
    openai_chat.API.name: openai_chat.API,
    anthropic.API.name: anthropic.API,
    openai_responses.API.name: openai_responses.API,
    gemini.API.name: gemini.API,
}
