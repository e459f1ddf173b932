"""What the scripted model says: replies, the conversation they answer, and scripts.

Everything here is protocol-neutral. A protocol module (``protocols/``) turns its API's
request into a :class:`Conversation` (messages in the OpenAI chat shape, plus the tools the
request offered) and a :class:`Reply` into its API's streaming wire format. A script is a
function of the conversation so far that returns the next reply: text, tool calls, an
HTTP error, or a hang, optionally after a pause (``Reply.after``), as a slow model thinks.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class Reply:
    """What the model says next: text, tool calls, an HTTP error, or nothing at all (hang);
    ``delay`` seconds pass before the answer starts."""

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    status: int = 200
    hang: bool = False
    delay: float = 0.0

    @classmethod
    def say(cls, text: str) -> Reply:
        return cls(text=text)

    @classmethod
    def call(cls, name: str, **arguments: Any) -> Reply:
        return cls(tool_calls=(ToolCall(name, arguments),))

    @classmethod
    def error(cls, status: int, text: str = "scripted failure") -> Reply:
        return cls(text=text, status=status)

    @classmethod
    def stall(cls) -> Reply:
        return cls(hang=True)

    def after(self, seconds: float) -> Reply:
        """This reply, once ``seconds`` have passed (the server stopping ends the wait)."""
        return replace(self, delay=seconds)


@dataclass(frozen=True)
class Tool:
    """A tool the agent offered in its request: its name and its argument names."""

    name: str
    params: frozenset[str] = frozenset()


@dataclass
class Conversation:
    """The messages of one request (OpenAI chat shape: ``role`` system, developer, user,
    assistant or tool; ``content`` text or parts), with the questions a script asks."""

    messages: list[dict[str, Any]]
    tools: tuple[Tool, ...] = field(default=())

    @property
    def turn(self) -> int:
        """How many assistant turns came before this request (0 for the first)."""
        return sum(1 for m in self.messages if m.get("role") == "assistant")

    def tool_results(self) -> list[str]:
        return [text_of(m.get("content")) for m in self.messages if m.get("role") == "tool"]

    def last_tool_result(self) -> str:
        results = self.tool_results()
        return results[-1] if results else ""

    def system(self) -> str:
        return "\n".join(
            text_of(m.get("content"))
            for m in self.messages
            if m.get("role") in ("system", "developer")
        )

    def user(self) -> str:
        return "\n".join(
            text_of(m.get("content")) for m in self.messages if m.get("role") == "user"
        )

    def tool(self, kind: str) -> Tool | None:
        """The offered tool that does ``kind`` (``shell`` or ``write``), by the names agents
        give it; None when none was offered (or the request listed no tools)."""
        names = TOOL_NAMES[kind]
        for candidate in names:
            for tool in self.tools:
                if tool.name == candidate:
                    return tool
        return None


def text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


Script = Callable[[Conversation], Reply]

#: The names agents give their shell tool and their file-write tool, in order of preference.
TOOL_NAMES: dict[str, tuple[str, ...]] = {
    "shell": ("bash", "Bash", "exec_command", "shell", "run_shell_command"),
    "write": ("write", "Write", "write_file"),
}
#: Argument names of a shell tool's command, a write tool's path and its content.
COMMAND_KEYS = ("command", "cmd")
PATH_KEYS = ("path", "file_path", "filePath", "absolute_path")
CONTENT_KEYS = ("content",)


def _key(tool: Tool | None, keys: Iterable[str], default: str) -> str:
    if tool is not None:
        for key in keys:
            if key in tool.params:
                return key
    return default


def shell_call(conversation: Conversation, command: str) -> Reply:
    """A call of the agent's shell tool running ``command`` (Pi's ``bash`` when the request
    offered no tool list the server could read)."""
    tool = conversation.tool("shell")
    name = tool.name if tool is not None else "bash"
    arguments: dict[str, Any] = {_key(tool, COMMAND_KEYS, "command"): command}
    if tool is not None and "description" in tool.params:
        arguments["description"] = "Run a command"
    return Reply(tool_calls=(ToolCall(name, arguments),))


def write_call(conversation: Conversation, path: str, content: str) -> Reply:
    """A call of the agent's file-write tool; through its shell tool when it offers none."""
    tool = conversation.tool("write")
    if tool is None and conversation.tool("shell") is not None:
        quoted = content.replace("'", "'\\''")
        directory = path.rsplit("/", 1)[0]
        return shell_call(
            conversation, f"mkdir -p '{directory}' && printf '%s' '{quoted}' >'{path}'"
        )
    name = tool.name if tool is not None else "write"
    arguments = {
        _key(tool, PATH_KEYS, "path"): path,
        _key(tool, CONTENT_KEYS, "content"): content,
    }
    return Reply(tool_calls=(ToolCall(name, arguments),))


# -- scripts -----------------------------------------------------------------------

NAMESPACE = re.compile(r"\bn_[0-9a-f]{12}\b")


def note_text(namespace: str, slug: str, source: str, body: str) -> str:
    return (
        f"---\nid: {namespace}_1\ncreated_at: 2026-12-01T12:00:00Z\n"
        f"source_urls:\n- {source}\n---\n\n# {slug}\n\n{body}"
    )


def note_path(namespace: str, topic: str, slug: str) -> str:
    return f"/opt/impyard/knowledge/records/{topic}/{slug}--{namespace}_1.md"


def write_note(
    namespace: str,
    topic: str,
    slug: str,
    source: str,
    body: str,
    conversation: Conversation | None = None,
) -> Reply:
    """A write of note 1 of ``namespace``, with valid frontmatter, through the agent's
    file-write tool (Pi's ``write`` when no conversation names the tools)."""
    return write_call(
        conversation or Conversation([]),
        note_path(namespace, topic, slug),
        note_text(namespace, slug, source, body),
    )


def note_script(topic: str = "pi", slug: str = "first-note", body: str = "") -> Script:
    """Read the namespace with the shell tool, write one valid note with the file tool,
    then stop."""

    def script(conversation: Conversation) -> Reply:
        if conversation.turn == 0:
            return shell_call(conversation, "echo ns=$IMPYARD_KNOWLEDGE_NAMESPACE")
        match = NAMESPACE.search(conversation.last_tool_result())
        if conversation.turn == 1 and match:
            text = body or "The agent wrote this note through the scripted model server.\n"
            source = f"https://example.com/{slug}"
            return write_note(match.group(0), topic, slug, source, text, conversation)
        if conversation.turn == 1:
            return Reply.say("I could not read my namespace.")
        return Reply.say("Wrote one note.")

    return script
