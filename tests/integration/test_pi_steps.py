"""An agent's steps, live: the real Pi under its adapter prints one line per step on the
box's output as it happens, with every terminal control from the model or a tool
escaped, and reports its step count to the host (``runs show``); and the report endpoint
itself, asked from a plain box."""

from __future__ import annotations

import json
import re

import pytest

from impyard.devtools.model_server import Conversation, ModelServer, Reply, Script
from tests.helpers.agent_runs import (
    follow_live,
    start_run,
)
from tests.helpers.agents import SECRET_ENV
from tests.helpers.cli import Cli, json_lines
from tests.helpers.policy import edit_org
from tests.integration.test_pi_agent import set_up_owner

pytestmark = pytest.mark.docker

#: What a hostile tool result carries: retitle the terminal (OSC 0 ... BEL), clear it.
TITLE, CLEAR = "\x1b]0;pwned\x07", "\x1b[2J"
TITLE_SHOWN, CLEAR_SHOWN = r"\x1b]0;pwned\x07", r"\x1b[2J"
#: How long the model "thinks" before its last reply: the run is still in its box then.
THINKING_SECONDS = 4.0
# Bytes a terminal acts on: C0 controls but newline and tab, DEL, and C1 (as UTF-8).
RAW_CONTROL = re.compile(rb"[\x00-\x08\x0b-\x1f\x7f]|\xc2[\x80-\x9f]")


def hostile_script() -> Script:
    """A tool call whose command prints both sequences raw (and carries an ESC itself),
    then, after a pause, an answer that quotes the tool's output back verbatim."""
    command = f"printf 'retitle \\033]0;pwned\\007 clear \\033[2J done\\n' # {CLEAR}"

    def script(conversation: Conversation) -> Reply:
        if conversation.turn == 0:
            call = Reply.call("bash", command=command)
            return Reply(text=f"Printing {CLEAR}something.", tool_calls=call.tool_calls)
        said = conversation.last_tool_result()
        return Reply.say(f"The box printed:\n{said}\nThat is all.").after(THINKING_SECONDS)

    return script


@pytest.mark.usefixtures("pi_image")
def test_pi_steps_show_live_and_escaped_and_the_step_count_is_recorded(cli: Cli) -> None:
    with ModelServer(hostile_script()) as model:
        set_up_owner(cli, model.url)
        proc = start_run(cli, "--prompt", "Print something and tell me what it said.")
        # The owner's terminal: `impyard run` streams the box's output as it comes.
        live = follow_live(proc, b"[pi] tool bash: ", timeout=180)
        assert len(model.completions()) == 2
    out, err = live.out, live.err
    assert proc.returncode == 0, (out + err).decode(errors="replace")
    # The tool-call line reached the owner while the run was still in its box.
    assert live.line_while_running, out.decode(errors="replace")

    run_id = json.loads(cli("runs", "list", "--json").stdout)[0]["run_id"]
    on_disk = (cli.home / "runs" / run_id / "box.log").read_bytes()
    logs = cli("runs", "logs", run_id)
    # Nothing raw reaches the log or the owner's terminal; the sequences show, escaped.
    for shown in (on_disk, out, err, logs.stdout.encode(), logs.stderr.encode()):
        assert not RAW_CONTROL.search(shown), shown
    text = on_disk.decode()
    assert TITLE_SHOWN in text and CLEAR_SHOWN in text
    assert text in out.decode() and text == logs.stdout

    steps = [line for line in text.splitlines() if line.startswith("[pi] ")]
    assert all(len(line) <= 160 for line in steps), steps
    assert [re.sub(r" \(.*?\)", "", line.split(":")[0]) for line in steps] == [
        "[pi] model turn 1",
        "[pi] tool bash",
        "[pi] result bash",
        "[pi] model turn 2",
        "[pi] answer after 2 model turns and 1 tool call",
    ]
    assert f"1 tool call, says: Printing {CLEAR_SHOWN}something." in steps[0]
    assert f"# {CLEAR_SHOWN}" in steps[1]  # the call's own argument, escaped
    assert steps[2].endswith(f"1 line: retitle {TITLE_SHOWN} clear {CLEAR_SHOWN} done")
    # The final answer in full after the steps: its newlines kept, its controls escaped.
    answer = text.split(steps[-1] + "\n", 1)[1]
    assert answer == (
        f"The box printed:\nretitle {TITLE_SHOWN} clear {CLEAR_SHOWN} done\n\nThat is all.\n"
    )

    shown = json.loads(cli("runs", "show", run_id, "--json").stdout)
    assert shown["agent_steps"] == 2
    assert re.search(r"^agent steps +2$", cli("runs", "show", run_id).stdout, re.M)


@pytest.mark.usefixtures("pi_image")
def test_a_failing_model_still_fails_the_box_with_the_reason_escaped(cli: Cli) -> None:
    """Pi's JSON mode exits 0 after a model error; the box still exits 1 with the error."""
    with ModelServer(lambda conversation: Reply.error(401, f"bad key {TITLE}")) as model:
        set_up_owner(cli, model.url)
        result = cli("run", "yuko", "--prompt", "p", "--json", env=SECRET_ENV, timeout=180)
    run = json.loads(result.stdout)
    assert run["checkpoint"] == "quarantined" and run["reason"] == "exited with status 1", run
    logs = cli("runs", "logs", str(run["run_id"])).stdout
    assert f"401 bad key {TITLE_SHOWN}" in logs and not RAW_CONTROL.search(logs.encode())
    assert json.loads(cli("runs", "show", str(run["run_id"]), "--json").stdout)["agent_steps"]


def report(body: str) -> str:
    """A box command POSTing ``body`` to its gateway's report endpoint (busybox wget)."""
    return (
        "port=${HTTP_PROXY##*:}; port=${port%%/*}; "
        f"wget -q -Y off -O - --post-data '{body}' "
        '"http://127.0.0.1:$port/impyard/report?format=text" 2>&1; echo "wget=$?"'
    )


def test_a_box_reports_its_step_count_once_and_anything_else_is_refused(cli: Cli) -> None:
    assert cli("init").code == 0
    assert cli("imp", "create", "yuko").code == 0
    overlay = cli.home / "policy" / "imps" / "yuko.toml"
    overlay.parent.mkdir(exist_ok=True)
    overlay.write_text("[knowledge]\nenabled = false\n")  # a report needs no checkout
    assert cli("deploy").code == 0
    script = "; ".join(
        report(body)
        for body in ('{"agent_steps": "many", "run": "x"}', "[1]", '{"agent_steps": 7}')
    )
    result = cli("run", "yuko", "--prompt", "p", "--json", "--command", script, timeout=120)
    run = json.loads(result.stdout)
    logs = cli("runs", "logs", str(run["run_id"])).stdout
    assert "impyard-report: recorded 7 agent step(s)" in logs, logs
    assert logs.count("wget=0") == 1
    shown = json.loads(cli("runs", "show", str(run["run_id"]), "--json").stdout)
    assert shown["agent_steps"] == 7
    events = json_lines(cli("journal", "--run", str(run["run_id"]), "--json").stdout)
    reports = [
        (e["status"], e.get("reason", ""))
        for e in events
        if e["event"] == "gateway.request" and e.get("path") == "/impyard/report"
    ]
    # Each exchange is journaled as it ends, on its own connection's thread: the box sent
    # them one after another, but the lines may land in another order.
    assert sorted(status for status, _ in reports) == [200, 400, 400], reports
    refused = [reason for status, reason in reports if status == 400]
    [fields] = [reason for reason in refused if "agent_steps is not a whole number" in reason]
    assert "unknown field 'run'" in fields
    assert any('a report is a JSON object {"agent_steps": N}' in r for r in refused), refused


def test_without_a_gateway_nothing_is_reported(cli: Cli) -> None:
    assert cli("init").code == 0
    assert cli("imp", "create", "yuko").code == 0
    edit_org(cli.home, "[gateway]\nenabled = true", "[gateway]\nenabled = false")
    assert cli("deploy").code == 0
    result = cli("run", "yuko", "--prompt", "p", "--json", "--command", "true", timeout=120)
    run_id = str(json.loads(result.stdout)["run_id"])
    assert json.loads(cli("runs", "show", run_id, "--json").stdout)["agent_steps"] is None
    assert re.search(r"^agent steps +-$", cli("runs", "show", run_id).stdout, re.M)
