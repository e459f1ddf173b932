"""The real Gemini CLI in the real impyard-gemini image, driven through the real gateway.

A scripted model server on host loopback speaks the Gemini API (``--protocol gemini``)
and plays the model: the conversation the CLI sends decides the next step. Everything
else is the product: the image, its adapter (``box/gemini-imp``), the CLI, the gateway
credential route of docs/agents.md and the knowledge pipeline.
"""

from __future__ import annotations

import pytest

from impyard.devtools.model_server import ModelServer, Reply, note_script
from tests.helpers import agent_runs, agents
from tests.helpers.cli import Cli, json_lines
from tests.helpers.images import GEMINI_IMAGE

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("gemini_image")]

PROTOCOL = "gemini"
MODEL = "gemini-2.5-flash"
MODEL_PATH = f"/v1beta/models/{MODEL}:streamGenerateContent"


def set_up_owner(
    cli: Cli, upstream: str, *, extra: str = "", imps: tuple[str, ...] = ("yuko",)
) -> None:
    policy = agents.docs_agent_policy("Gemini CLI", upstream, MODEL)
    agents.set_up_agent_owner(cli, policy, "gemini", GEMINI_IMAGE, extra=extra, imps=imps)


def test_gemini_writes_a_note_through_the_gateway_showing_its_steps_live(cli: Cli) -> None:
    with ModelServer(note_script("gemini"), protocol=PROTOCOL) as model:
        set_up_owner(cli, model.url)
        watch = b"[gemini] tool run_shell_command"
        out = agent_runs.run_showing_steps_live(cli, watch, "--prompt", "Write one note.")
        turns = model.turns()
    assert "[gemini] tool run_shell_command: echo ns=$IMPYARD_KNOWLEDGE_NAMESPACE" in out
    assert "[gemini] tool write_file: /opt/impyard/knowledge/records/gemini/first-note" in out
    assert "[gemini] answer after 3 model turns and 2 tool calls:\nWrote one note." in out

    # Three model turns, each one streamed call of the Gemini API through the route, with
    # the route's key; the CLI offered its shell and write tools, and the contract came
    # from the image.
    assert [(t.method, t.path) for t in turns] == [("POST", f"{MODEL_PATH}?alt=sse")] * 3
    assert [t.headers["x-goog-api-key"] for t in turns] == [agents.SECRET] * 3
    first = turns[0].conversation
    assert first is not None
    assert first.tool("shell") is not None and first.tool("write") is not None
    run_id, namespace = agent_runs.assert_note_run_integrated(cli, first, "Write one note.")

    # No usage statistics (play.googleapis.com), update check or telemetry.
    agent_runs.assert_first_note_landed_asking_only_the_model(
        cli, "gemini", run_id, namespace, MODEL_PATH
    )


@pytest.mark.one_runtime
def test_the_provider_key_reaches_the_model_server_and_never_the_box(cli: Cli) -> None:
    with ModelServer(agents.secret_probe_script(agents.SECRET), protocol=PROTOCOL) as model:
        set_up_owner(cli, model.url)
        code, run = agent_runs.run_json(cli, "yuko", "--prompt", "Look for the key.")
        turns = model.turns()
    assert code == 0, run
    assert [t.headers["x-goog-api-key"] for t in turns] == [agents.SECRET] * 2
    assert turns[1].conversation is not None
    seen = turns[1].conversation.last_tool_result()
    agents.assert_probe_found_no_secret(
        seen,
        "GEMINI_API_KEY=impyard-gateway-adds-the-key",  # only the placeholder
        "GOOGLE_GEMINI_BASE_URL=http://127.0.0.1:3128/route/llm",
        f"IMPYARD_MODEL={MODEL}",
        cli=cli,
        run_id=str(run["run_id"]),
    )


@pytest.mark.one_runtime
def test_failing_hanging_and_over_budget_models_quarantine_legibly(cli: Cli) -> None:
    """Three imps under one serve: a provider answering 500, one that never answers (the
    box times out), and a budget of two requests. The CLI tries a failing call twice, not
    ten times: each is quarantined with a reason and the CLI's own words in `runs logs`."""
    failing = ModelServer(lambda c: Reply.error(500, "scripted provider outage"), protocol=PROTOCOL)
    hanging = ModelServer(lambda c: Reply.stall(), protocol=PROTOCOL)
    with failing, hanging, ModelServer(agents.chatty_script(), protocol=PROTOCOL) as chatty:
        servers = (failing, hanging, chatty)
        agent_runs.serve_failing_hanging_chatty(
            cli, set_up_owner, servers, header="x-goog-api-key", value="{secret}"
        )
        # Two attempts at the 500 (the CLI's default is ten, over minutes).
        assert len(failing.turns()) == 2 and len(hanging.turns()) == 1
        # The third request never left the gateway (its 429 is tried again, then ends it).
        assert len(chatty.turns()) == 2

    runs, shown = agent_runs.runs_by_imp(cli)
    agent_runs.assert_all_quarantined(shown)
    # The CLI exits with the failed call's HTTP status, taken modulo 256: 500 is 244.
    assert shown["failing"]["reason"] == "exited with status 244"
    failing_log = cli("runs", "logs", runs["failing"]["run_id"]).stdout
    assert "[gemini] model turn 1 (" in failing_log
    assert "scripted provider outage" in failing_log
    assert shown["hanging"]["timed_out"] is True
    assert shown["hanging"]["reason"] == "timed out and killed"
    assert shown["thrifty"]["reason"] == "exited with status 173"  # 429
    budget_rule = "gateway.budget.requests_per_run"
    events = json_lines(cli("journal", "--run", runs["thrifty"]["run_id"], "--json").stdout)
    refused = [e for e in events if e["event"] == "gateway.request" and e["status"] == 429]
    assert refused and all(e["rule"] == budget_rule for e in refused)
    events = json_lines(cli("journal", "--run", runs["failing"]["run_id"], "--json").stdout)
    assert [e["status"] for e in events if e.get("path") == MODEL_PATH] == [500] * 2


@pytest.mark.one_runtime
def test_a_rejected_gemini_note_is_reworked_by_gemini_and_lands_once(cli: Cli) -> None:
    script = agents.titled_then_rework_script("gemini")
    with ModelServer(script, protocol=PROTOCOL) as model:
        set_up_owner(cli, model.url)
        agent_runs.serve_one_reworked_task(cli)
        turns = [t.conversation for t in model.turns() if t.conversation is not None]

    rework = agent_runs.rework_of_rejected(cli, "gemini")
    # What the CLI was told in the rework run: the violation by its new name, and the
    # contract's rework rules in its system instruction.
    contract = ("do not finish until impyard-check prints ok",)
    agent_runs.assert_rework_told(turns, rework, count=3, contract=contract)
    agent_runs.assert_rework_landed_once(cli, "gemini", rework)
