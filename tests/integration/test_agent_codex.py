"""The real Codex CLI in the real impyard-codex image, driven through the real gateway.

A scripted model server on host loopback speaks the OpenAI Responses API
(``--protocol openai-responses``) and plays the model: the conversation Codex sends
decides the next step. Everything else is the product: the image, its adapter
(``box/codex-imp``), the CLI, the gateway credential route of docs/agents.md and the
knowledge pipeline.
"""

from __future__ import annotations

import pytest

from impyard.devtools.model_server import (
    Conversation,
    ModelServer,
    Reply,
    note_script,
    shell_call,
)
from tests.helpers import agent_runs, agents
from tests.helpers.cli import Cli, json_lines
from tests.helpers.images import CODEX_IMAGE

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("codex_image")]

PROTOCOL = "openai-responses"
#: A model in Codex's own list: it offers apply_patch and warns of nothing.
MODEL = "gpt-5.5"


def set_up_owner(
    cli: Cli, upstream: str, *, extra: str = "", imps: tuple[str, ...] = ("yuko",)
) -> None:
    policy = agents.docs_agent_policy("Codex", upstream, MODEL)
    agents.set_up_agent_owner(cli, policy, "codex", CODEX_IMAGE, extra=extra, imps=imps)


def test_codex_writes_a_note_through_the_gateway_showing_its_steps_live(cli: Cli) -> None:
    with ModelServer(note_script("codex"), protocol=PROTOCOL) as model:
        set_up_owner(cli, model.url)
        watch = b"[codex] tool exec_command"
        out = agent_runs.run_showing_steps_live(cli, watch, "--prompt", "Write one note.")
        turns = model.turns()
    assert "[codex] tool exec_command: echo ns=$IMPYARD_KNOWLEDGE_NAMESPACE" in out
    assert "[codex] answer after 3 model turns and 2 tool calls:\nWrote one note." in out

    # Three model turns, each one POST of the Responses API through the route, with the
    # route's key; Codex offered its shell tool, and the contract came from the image.
    assert [(t.method, t.path) for t in turns] == [("POST", "/v1/responses")] * 3
    assert [t.headers["authorization"] for t in turns] == [f"Bearer {agents.SECRET}"] * 3
    first = turns[0].conversation
    assert first is not None and first.tool("shell") is not None
    assert turns[0].body["model"] == MODEL and turns[0].body["stream"] is True
    run_id, namespace = agent_runs.assert_note_run_integrated(cli, first, "Write one note.")
    # The box's output is the steps and the answer: no warning of Codex's before them.
    logs = cli("runs", "logs", run_id).stdout
    assert logs.startswith("[codex] model turn 1 ("), logs

    # Codex asked for no update, analytics, plugin or model list.
    agent_runs.assert_first_note_landed_asking_only_the_model(
        cli, "codex", run_id, namespace, "/v1/responses"
    )


@pytest.mark.one_runtime
def test_the_provider_key_reaches_the_model_server_and_never_the_box(cli: Cli) -> None:
    def script(conversation: Conversation) -> Reply:
        if conversation.turn == 0:
            command = agents.secret_probe_command(agents.SECRET, show="$CODEX_HOME/config.toml")
            return shell_call(conversation, command)
        return Reply.say("Looked everywhere.")

    with ModelServer(script, protocol=PROTOCOL) as model:
        set_up_owner(cli, model.url)
        code, run = agent_runs.run_json(cli, "yuko", "--prompt", "Look for the key.")
        turns = model.turns()
    assert code == 0, run
    assert [t.headers["authorization"] for t in turns] == [f"Bearer {agents.SECRET}"] * 2
    assert turns[1].conversation is not None
    seen = turns[1].conversation.last_tool_result()
    agents.assert_probe_found_no_secret(
        seen,
        "OPENAI_API_KEY=impyard-gateway-adds-the-key",  # only the placeholder
        f"IMPYARD_MODEL={MODEL}",
        "\nTMPDIR=/tmp\n",  # the box's scratch space, not Codex's own
        'base_url = "http://127.0.0.1:3128/route/llm/v1"',
        cli=cli,
        run_id=str(run["run_id"]),
    )


@pytest.mark.one_runtime
def test_failing_hanging_and_over_budget_models_quarantine_legibly(cli: Cli) -> None:
    """Three imps under one serve: a provider answering 500, one that never answers (the
    box times out), and a budget of two requests. Codex retries none of them: each is
    quarantined with a reason and Codex's own words in `runs logs`."""
    failing = ModelServer(lambda c: Reply.error(500, "scripted provider outage"), protocol=PROTOCOL)
    hanging = ModelServer(lambda c: Reply.stall(), protocol=PROTOCOL)
    with failing, hanging, ModelServer(agents.chatty_script(), protocol=PROTOCOL) as chatty:
        servers = (failing, hanging, chatty)
        agent_runs.serve_failing_hanging_chatty(
            cli, set_up_owner, servers, header="Authorization", value="Bearer {secret}"
        )
        # One request each: no retry of the 500 (Codex's default is ten more).
        assert len(failing.turns()) == 1 and len(hanging.turns()) == 1
        assert len(chatty.turns()) == 2  # the third request never left the gateway

    runs, shown = agent_runs.runs_by_imp(cli)
    agent_runs.assert_all_quarantined(shown)
    assert shown["failing"]["reason"] == "exited with status 1"
    failing_log = cli("runs", "logs", runs["failing"]["run_id"]).stdout
    assert "[codex] model turn 1 (" in failing_log and "high demand" in failing_log
    assert shown["hanging"]["timed_out"] is True
    assert shown["hanging"]["reason"] == "timed out and killed"
    assert shown["thrifty"]["reason"] == "exited with status 1"
    assert "429 Too Many Requests" in cli("runs", "logs", runs["thrifty"]["run_id"]).stdout
    events = json_lines(cli("journal", "--run", runs["thrifty"]["run_id"], "--json").stdout)
    refused = [e for e in events if e["event"] == "gateway.request" and e["status"] == 429]
    assert len(refused) == 1 and refused[0]["rule"] == "gateway.budget.requests_per_run"
    events = json_lines(cli("journal", "--run", runs["failing"]["run_id"], "--json").stdout)
    assert [e["status"] for e in events if e.get("path") == "/v1/responses"] == [500]


@pytest.mark.one_runtime
def test_a_rejected_codex_note_is_reworked_by_codex_and_lands_once(cli: Cli) -> None:
    with ModelServer(agents.titled_then_rework_script("codex"), protocol=PROTOCOL) as model:
        set_up_owner(cli, model.url)
        agent_runs.serve_one_reworked_task(cli)
        turns = [t.conversation for t in model.turns() if t.conversation is not None]

    rework = agent_runs.rework_of_rejected(cli, "codex")
    # What Codex was told in the rework run: the violation by its new name, and the
    # contract's rework rules in its developer instructions.
    contract = ("do not finish until impyard-check prints ok",)
    agent_runs.assert_rework_told(turns, rework, count=3, contract=contract)
    agent_runs.assert_rework_landed_once(cli, "codex", rework)
