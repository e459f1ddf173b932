"""A scripted model server for driving real agents (Pi, Claude Code, Codex, Gemini CLI,
OpenCode) without a model provider.

It answers a model API's own wire protocol (``protocols/``: OpenAI chat completions,
Anthropic messages, OpenAI responses, Gemini) from a *script*: a function of the
conversation so far that returns the next reply (``script``). Tool-call arguments are
streamed split across chunks, as real providers send them, so each agent's incremental
parser is exercised.

Stdlib only: tests, the demo and the agent bench all use it. Run it alone with
``python -m impyard.devtools.model_server --protocol NAME`` to serve the ``note`` script.
"""

from __future__ import annotations

from impyard.devtools.model_server.script import (
    NAMESPACE,
    Conversation,
    Reply,
    Script,
    Tool,
    ToolCall,
    note_script,
    shell_call,
    write_call,
    write_note,
)
from impyard.devtools.model_server.server import ModelServer, Received

__all__ = [
    "NAMESPACE",
    "Conversation",
    "ModelServer",
    "Received",
    "Reply",
    "Script",
    "Tool",
    "ToolCall",
    "note_script",
    "shell_call",
    "write_call",
    "write_note",
]
