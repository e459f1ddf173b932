"""The real OpenCode agent in the real impyard-opencode image, driven through the real
gateway by the scripted model server over OpenAI chat completions (OpenCode's
OpenAI-compatible provider): a note lands with its steps shown live, a failing model and
a spent budget quarantine in seconds, a rework reaches OpenCode with its violations and
lands once, the key never enters the box, and OpenCode asks nothing but its model calls.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from impyard.devtools.model_server import (
    Conversation,
    ModelServer,
    Reply,
    note_script,
)
from tests.helpers import agent_runs, agents
from tests.helpers.cli import Cli, json_lines
from tests.helpers.git import git
from tests.helpers.images import OPENCODE_IMAGE
from tests.helpers.policy import edit_org

pytestmark = pytest.mark.docker


def set_up_owner(
    cli: Cli, upstream: str, *, extra: str = "", imps: tuple[str, ...] = ("yuko",)
) -> None:
    """The policy docs/agents.md gives for OpenCode (route llm, the key in
    IMPYARD_SECRET_LLM) pointed at ``upstream``, and OpenCode imps."""
    policy = agents.docs_agent_policy("OpenCode", upstream)
    agents.set_up_agent_owner(cli, policy, "opencode", OPENCODE_IMAGE, extra=extra, imps=imps)


def run_json(cli: Cli, *args: str) -> tuple[int, dict[str, Any]]:
    return agent_runs.run_json(cli, *args, timeout=240)


def journal(cli: Cli, run_id: str) -> list[dict[str, Any]]:
    return json_lines(cli("journal", "--run", run_id, "--json").stdout)


@pytest.mark.usefixtures("opencode_image")
def test_opencode_lands_a_note_with_its_steps_live_and_asks_only_its_model(cli: Cli) -> None:
    with ModelServer(note_script(topic="opencode")) as model:
        set_up_owner(cli, model.url)
        prompt = "Write one note about the box you run in."
        watch = b"[opencode] tool bash: "
        out = agent_runs.run_showing_steps_live(cli, watch, "--prompt", prompt, timeout=240)
        turns = model.completions()

    # Three model calls (read the namespace, write the note, answer) and no title request:
    # each carried the tools and the key the gateway added, never the box's placeholder.
    assert len(turns) == 3, [t.body.get("messages") for t in turns]
    assert [t.headers["authorization"] for t in turns] == [f"Bearer {agents.SECRET}"] * 3
    first = turns[0].body
    assert first["stream"] is True and first["model"] == "scripted-model"
    assert {t["function"]["name"] for t in first["tools"]} >= {"bash", "write", "read"}
    conversation = Conversation(first["messages"])
    run_id = json.loads(cli("runs", "list", "--json").stdout)[0]["run_id"]
    shown = json.loads(cli("runs", "show", run_id, "--json").stdout)
    namespace = shown["namespace"]
    # The record contract comes from the image, with the host-issued namespace in it.
    assert f"records/<topic>/<slug>--{namespace}_<n>.md" in conversation.system()
    assert "Write one note about the box" in conversation.user()
    assert shown["checkpoint"] == "integrated" and shown["agent_steps"] == 3

    steps = [line for line in out.splitlines() if line.startswith("[opencode] ")]
    assert [re.sub(r" \(.*?\)", "", line.split(":")[0]) for line in steps] == [
        "[opencode] model turn 1",
        "[opencode] tool bash",
        "[opencode] result bash",
        "[opencode] model turn 2",
        "[opencode] tool write",
        "[opencode] result write",
        "[opencode] model turn 3",
        "[opencode] answer after 3 model turns and 2 tool calls",
    ]
    path = f"records/opencode/first-note--{namespace}_1.md"
    assert f"[opencode] tool write: /opt/impyard/knowledge/{path} (+content)" in steps
    repo = cli("knowledge", "yuko").stdout.strip()
    assert git("-C", repo, "log", "-1", "--name-only", "--format=").stdout.split() == [path]

    # OpenCode reached for nothing but its model: no catalogue, update, plugin install or
    # tool download went to the gateway, refused or not (besides the box's own report of
    # its step count to the gateway's control endpoint).
    requests = [e for e in journal(cli, run_id) if e["event"] == "gateway.request"]
    reported = [e for e in requests if e["path"] == "/impyard/report"]
    assert [e["route"] for e in requests if e not in reported] == ["llm"] * 3, requests


def outage_script(conversation: Conversation) -> Reply:
    return Reply.error(500, "scripted provider outage")


@pytest.mark.one_runtime
@pytest.mark.usefixtures("opencode_image")
def test_failing_hanging_and_over_budget_models_quarantine_legibly(cli: Cli) -> None:
    """Three imps under one serve: a provider answering 500, one that never answers (the
    box times out), and a budget of two requests. OpenCode retries a failed model call
    five times over a minute; the image caps it at two failures, with the provider's
    message in `runs logs`."""
    failing = ModelServer(outage_script)
    hanging = ModelServer(lambda conversation: Reply.stall())
    with failing, hanging, ModelServer(agents.chatty_script()) as chatty:
        servers = (failing, hanging, chatty)
        agent_runs.serve_failing_hanging_chatty(
            cli,
            set_up_owner,
            servers,
            header="Authorization",
            value="Bearer {secret}",
            hang_seconds=40,
        )
        assert len(failing.completions()) == 2 and hanging.completions()
        assert len(chatty.completions()) == 2  # the third request never left the gateway

    runs, shown = agent_runs.runs_by_imp(cli)
    assert {imp: (s["checkpoint"], s["reason"]) for imp, s in shown.items()} == {
        "failing": ("quarantined", "exited with status 1"),
        "hanging": ("quarantined", "timed out and killed"),
        "thrifty": ("quarantined", "exited with status 1"),
    }
    failing_logs = cli("runs", "logs", runs["failing"]["run_id"]).stdout
    assert (
        "opencode-imp: the model API failed 2 times, giving up: scripted provider outage"
    ) in failing_logs
    budget_rule = "gateway.budget.requests_per_run"
    assert budget_rule in cli("runs", "logs", runs["thrifty"]["run_id"]).stdout
    refused = [
        e
        for e in journal(cli, runs["thrifty"]["run_id"])
        if e["event"] == "gateway.request" and e["status"] == 429
    ]
    assert len(refused) == 2 and all(e["rule"] == budget_rule for e in refused)


REWORK_SLUG = "titled-note"
TITLED_MARKER = "written-with-a-title-5c2e"
FIXED_MARKER = "fixed-in-the-rework-8a17"


@pytest.mark.one_runtime
@pytest.mark.usefixtures("opencode_image")
def test_a_rework_reaches_opencode_with_its_violation_and_the_fix_lands_once(
    cli: Cli,
) -> None:
    script = agents.titled_then_rework_script("opencode", REWORK_SLUG, TITLED_MARKER, FIXED_MARKER)
    with ModelServer(script) as model:
        set_up_owner(cli, model.url)
        edit_org(cli.home, "rework_attempts = 0", "rework_attempts = 1")
        assert cli("deploy").code == 0
        assert cli("task", "add", "yuko", "--prompt", "Note what you know.").code == 0
        served = cli("serve", "--once", env=agents.SECRET_ENV, timeout=300)
        assert served.code == 0, served.stdout + served.stderr
        turns = model.completions()

    first, second = json.loads(cli("task", "list", "--json").stdout)
    assert first["checkpoint"] == "rejected"
    assert second["rework_of"] == first["run_id"] and second["checkpoint"] == "integrated"
    # The refused run: write, answer. Its rework, told the violation: read the note (the
    # write tool replaces only a file read first), write it fixed, impyard-check, answer.
    assert len(turns) == 6, [Conversation(t.body["messages"]).last_tool_result() for t in turns]
    told = Conversation(turns[2].body["messages"]).user()
    assert "# Rework of run" in told and ": frontmatter: " in told, told
    assert "impyard-check: ok" in Conversation(turns[5].body["messages"]).last_tool_result()
    new_ns = json.loads(cli("runs", "show", second["run_id"], "--json").stdout)["namespace"]
    repo = cli("knowledge", "yuko").stdout.strip()
    path = f"records/opencode/{REWORK_SLUG}--{new_ns}_1.md"
    landed = git("-C", repo, "log", "--format=%H", "main", "--", "records/opencode").stdout
    assert len(landed.split()) == 1
    note = git("-C", repo, "show", f"main:{path}").stdout
    assert "title:" not in note and FIXED_MARKER in note and TITLED_MARKER not in note


@pytest.mark.one_runtime
@pytest.mark.usefixtures("opencode_image")
def test_the_provider_key_reaches_the_model_server_and_never_the_box(cli: Cli) -> None:
    with ModelServer(agents.secret_probe_script(agents.SECRET, show="$OPENCODE_CONFIG")) as model:
        set_up_owner(cli, model.url)
        code, run = run_json(cli, "yuko", "--prompt", "Look for the key.")
        turns = model.completions()
    assert code == 0, run
    seen = agents.probe_output_after_bearer_turns(turns)
    agents.assert_probe_found_no_secret(
        seen,
        '"apiKey": "impyard-gateway-adds-the-key"',  # only the placeholder
        "IMPYARD_MODEL=scripted-model",
        cli=cli,
        run_id=str(run["run_id"]),
    )


@pytest.mark.one_runtime
@pytest.mark.usefixtures("opencode_image")
def test_a_host_opencode_reaches_for_is_refused_and_journaled_and_the_run_lands(
    cli: Cli,
) -> None:
    """The owner turns OpenCode's models.dev fetch back on ([box.env] overrides the
    image): the gateway refuses that host and journals it, and the note still lands."""
    with ModelServer(note_script(topic="opencode")) as model:
        set_up_owner(cli, model.url)
        overlays = cli.home / "policy" / "imps"
        overlays.mkdir(exist_ok=True)
        (overlays / "yuko.toml").write_text('[box.env]\nOPENCODE_DISABLE_MODELS_FETCH = "0"\n')
        assert cli("deploy").code == 0
        code, run = run_json(cli, "yuko", "--prompt", "Write one note.")
    assert code == 0 and run["checkpoint"] == "integrated", run
    requests = [e for e in journal(cli, str(run["run_id"])) if e["event"] == "gateway.request"]
    refused = [e for e in requests if e["decision"] != "allowed"]
    assert refused and {e["host"] for e in refused} == {"models.opencode.ai"}, refused
    assert all(e["status"] == 403 and e["rule"] for e in refused), refused
