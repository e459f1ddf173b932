"""Driving a real agent image through the real gateway: the owner's policy for an agent
(taken from its section of docs/agents.md, so the documented snippet is the one tested),
and protocol-neutral scripts of the scripted model server that every agent's tests share
(the agent's own shell and file-write tools are picked from the tools it offered)."""

from __future__ import annotations

import base64
import re
from collections.abc import Sequence
from pathlib import Path

from impyard.devtools.model_server import (
    NAMESPACE,
    Conversation,
    Received,
    Reply,
    Script,
    ToolCall,
    shell_call,
    write_call,
    write_note,
)
from impyard.devtools.model_server.script import PATH_KEYS, note_path, note_text
from tests.helpers.cli import Cli

REPO = Path(__file__).resolve().parents[2]
SECRET = "sk-impyard-test-0123456789abcdefghijklmnopqrstuv"
SECRET_ENV = {"IMPYARD_SECRET_LLM": SECRET}
#: Read tools an agent's write tool requires before it replaces a file (Claude Code's
#: Read, OpenCode's read: "This tool will fail if you did not read the file first").
READ_BEFORE_WRITE = ("Read", "read")
#: The slug of the note a rejected run writes and its rework fixes, and the markers of the
#: rejected and the fixed body.
REWORK_SLUG = "reworked-note"
TITLED_MARKER = "written-with-a-title-5c2a"
FIXED_MARKER = "fixed-after-impyard-check-41b9"


def docs_agent_policy(section: str, upstream: str, model: str = "scripted-model") -> str:
    """The TOML an owner copies from the ``## <section>`` of docs/agents.md, pointed at
    ``upstream`` (the scripted server on loopback, allowed as private) and asking for
    ``model``."""
    text = (REPO / "docs" / "agents.md").read_text()
    body = text.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```toml\n(.*?)```", body, re.DOTALL)
    assert block is not None, f"docs/agents.md's {section} section has no TOML block"
    toml = re.sub(
        r'upstream = "[^"]+"', f'upstream = "{upstream}"\nallow_private = true', block.group(1)
    )
    return re.sub(r'IMPYARD_MODEL = "[^"]+"', f'IMPYARD_MODEL = "{model}"', toml)


def set_up_agent_owner(
    cli: Cli, policy: str, agent: str, image: str, *, extra: str = "", imps: tuple[str, ...]
) -> None:
    """A data root whose org policy holds ``policy`` (and ``extra``), deployed, with
    ``imps`` created to run ``agent`` in ``image``."""
    assert cli("init").code == 0
    org = cli.home / "policy" / "org.toml"
    org.write_text(org.read_text() + "\n" + policy + "\n" + extra)
    deployed = cli("deploy")
    assert deployed.code == 0, deployed.stdout + deployed.stderr
    for imp in imps:
        created = cli("imp", "create", imp, "--agent", agent, "--image", image)
        assert created.code == 0, created.stderr


def secret_probe_command(secret: str, show: str = "") -> str:
    """A shell command that looks for ``secret`` in every process's environment and in
    /tmp, /opt/impyard and /etc, printing ``hits=0`` when it is nowhere, then the
    environment and ``show`` (a file to print). The pattern travels base64-encoded, so
    the command itself never holds the secret plainly, and is read from a pipe: the Gemini
    CLI refuses to run a command holding a command substitution."""
    encoded = base64.b64encode(secret.encode()).decode()
    shown = f'; cat "{show}"' if show else ""
    return (
        f"echo {encoded} | base64 -d | {{ read -r s; hits=0; "
        'for f in /proc/[0-9]*/environ; do grep -qaF -e "$s" "$f" 2>/dev/null && '
        'echo "hit $f" && hits=1; done; '
        'grep -rlaF -e "$s" /tmp /opt/impyard /etc 2>/dev/null && hits=1; '
        f'echo "hits=$hits"; env | sort{shown}; }}'
    )


def secret_probe_script(secret: str, show: str = "") -> Script:
    """Run :func:`secret_probe_command` with the agent's shell tool, then stop."""

    def script(conversation: Conversation) -> Reply:
        if conversation.turn == 0:
            return shell_call(conversation, secret_probe_command(secret, show))
        return Reply.say("Looked everywhere.")

    return script


def assert_secret_kept_out(cli: Cli, run_id: str, secret: str) -> None:
    """``secret`` is in none of the run's logs, its record, the journal, or any file of the
    data root but the knowledge repositories'."""
    for output in (
        cli("runs", "logs", run_id).stdout,
        cli("runs", "show", run_id, "--json").stdout,
        cli("journal", "--json").stdout,
    ):
        assert secret not in output
    for path in cli.home.rglob("*"):
        if path.is_file() and "repo.git" not in path.parts and "origin.git" not in path.parts:
            assert secret.encode() not in path.read_bytes(), path


def probe_output_after_bearer_turns(turns: Sequence[Received]) -> str:
    """What the secret probe printed, as an OpenAI-chat agent's second and last model turn
    sent it back; both turns carried the route's key as a Bearer token (the gateway adds
    it: the box never holds it)."""
    assert [t.headers["authorization"] for t in turns] == [f"Bearer {SECRET}"] * 2
    return Conversation(turns[1].body["messages"]).last_tool_result()


def assert_probe_found_no_secret(seen: str, *expected: str, cli: Cli, run_id: str) -> None:
    """What :func:`secret_probe_command` printed in the box (``seen``) holds ``hits=0``,
    each of ``expected`` (the placeholder and settings the box has instead) and never
    :data:`SECRET`; nor does anything the run left on the host."""
    assert "hits=0" in seen, seen
    for setting in expected:
        assert setting in seen
    assert SECRET not in seen
    assert_secret_kept_out(cli, run_id, SECRET)


def chatty_script() -> Script:
    """Three shell turns before an answer: more requests than a budget of two allows."""

    def script(conversation: Conversation) -> Reply:
        if conversation.turn < 3:
            return shell_call(conversation, f"echo step {conversation.turn}")
        return Reply.say("Done after three steps.")

    return script


def titled_then_rework_script(
    topic: str,
    slug: str = REWORK_SLUG,
    titled: str = TITLED_MARKER,
    fixed: str = FIXED_MARKER,
    *,
    read_first: bool = True,
) -> Script:
    """First run: write a note with a ``title:`` key records may not have (its body
    ``titled``) and finish without checking, so the run is rejected. A rework run (its
    prompt says so, and names the violation under this run's namespace): read the note
    first where the agent has a tool that must (Claude Code's Write refuses to replace a
    file its Read has not read), rewrite it without the title (its body ``fixed``), run
    impyard-check, and finish once it prints ok. A step whose precondition fails ends the
    run saying so. ``read_first`` off: an agent whose write tool replaces a file unread
    (Pi's, though it offers a ``read``) rewrites it at once, with no turn to read it."""

    def script(conversation: Conversation) -> Reply:
        match = NAMESPACE.search(conversation.system())
        if match is None:
            return Reply.say("UNEXPECTED: no namespace in the system prompt.")
        namespace = match.group(0)
        relative = f"records/{topic}/{slug}--{namespace}_1.md"
        url = f"https://example.com/{slug}"
        if "# Rework of run" not in conversation.user():
            if conversation.turn == 0:
                text = note_text(namespace, slug, url, f"{titled}\n")
                text = text.replace("created_at:", "title: Reworked\ncreated_at:", 1)
                return write_call(conversation, note_path(namespace, topic, slug), text)
            return Reply.say("Wrote one note.")
        if f"- {relative}: frontmatter: " not in conversation.user():
            return Reply.say("UNEXPECTED: the rework task does not name the note.")
        reads = [t for t in conversation.tools if read_first and t.name in READ_BEFORE_WRITE]
        turn = conversation.turn - len(reads)
        if turn < 0:
            path = note_path(namespace, topic, slug)
            key = next((k for k in PATH_KEYS if k in reads[0].params), "file_path")
            return Reply(tool_calls=(ToolCall(reads[0].name, {key: path}),))
        if turn == 0:
            return write_note(namespace, topic, slug, url, f"{fixed}\n", conversation)
        if turn == 1:
            return shell_call(conversation, "impyard-check")
        if "impyard-check: ok" in conversation.last_tool_result():
            return Reply.say("Fixed every listed violation; impyard-check prints ok.")
        return Reply.say(f"UNEXPECTED at turn {conversation.turn}")

    return script
