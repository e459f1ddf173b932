"""The real Pi agent in the real impyard-pi image, driven through the real gateway.

A scripted OpenAI-compatible model server on host loopback plays the model
(``impyard/devtools/model_server.py``): the conversation Pi sends decides the next step.
Everything else is the product: the image, its adapter, the CLI, the gateway
credential route and the knowledge pipeline.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from impyard.devtools.model_server import (
    NAMESPACE,
    Conversation,
    ModelServer,
    Reply,
    Script,
    note_script,
    write_note,
)
from tests.helpers import agent_runs, agents
from tests.helpers.cli import Cli, json_lines
from tests.helpers.git import git
from tests.helpers.images import PI_IMAGE
from tests.helpers.policy import edit_org
from tests.tls_server import TlsPageServer

pytestmark = pytest.mark.docker

REPO = Path(__file__).resolve().parents[2]


def readme_agent_policy(upstream: str, model: str = "scripted-model") -> str:
    """The TOML an owner copies from the README's "Run a real agent" section."""
    text = (REPO / "README.md").read_text()
    section = text.split("## Run a real agent", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```toml\n(.*?)```", section, re.DOTALL)
    assert block is not None, "the README's agent section has no TOML block"
    toml = "\n".join(line.removeprefix("   ") for line in block.group(1).splitlines())
    # The scripted model server listens on loopback, which a route reaches only when allowed.
    toml = re.sub(r'upstream = "[^"]+"', f'upstream = "{upstream}"\nallow_private = true', toml)
    return re.sub(r'IMPYARD_MODEL = "[^"]+"', f'IMPYARD_MODEL = "{model}"', toml)


def set_up_owner(
    cli: Cli, upstream: str, *, extra: str = "", imps: tuple[str, ...] = ("yuko",)
) -> None:
    assert cli("init").code == 0
    org = cli.home / "policy" / "org.toml"
    org.write_text(org.read_text() + "\n" + readme_agent_policy(upstream) + "\n" + extra)
    deployed = cli("deploy")
    assert deployed.code == 0, deployed.stdout + deployed.stderr
    for imp in imps:
        created = cli("imp", "create", imp, "--agent", "pi", "--image", PI_IMAGE)
        assert created.code == 0, created.stderr


def note_landed_alone_by(repo: str, run: dict[str, Any], path: str) -> str:
    """The note at ``path``: the one file the last commit of ``repo`` added, trailed by the
    host as ``run``'s append (imp, run, base and mode), whatever Pi wrote."""
    message = git("-C", repo, "log", "-1", "--format=%B").stdout
    for trailer in (
        "Impyard-Imp: yuko",
        f"Impyard-Run: {run['run_id']}",
        f"Impyard-Base: {run['base_commit']}",
        "Impyard-Mode: append",
    ):
        assert trailer in message
    assert git("-C", repo, "log", "-1", "--name-only", "--format=").stdout.split() == [path]
    return git("-C", repo, "show", f"main:{path}").stdout


@pytest.fixture
def model() -> Iterator[ModelServer]:
    with ModelServer(note_script()) as server:
        yield server


@pytest.mark.usefixtures("pi_image")
def test_pi_writes_a_note_that_integrates_with_trusted_trailers(
    cli: Cli, model: ModelServer
) -> None:
    set_up_owner(cli, model.url)
    code, run = agent_runs.run_json(
        cli, "yuko", "--prompt", "Write one note about the box you run in."
    )
    assert code == 0, run
    assert run["checkpoint"] == "integrated", run
    namespace = str(run["namespace"])

    # Pi read the namespace with bash and wrote the note with write, over three model turns.
    turns = model.completions()
    assert len(turns) == 3
    first = turns[0].body
    assert first["stream"] is True
    assert {t["function"]["name"] for t in first["tools"]} >= {"read", "bash", "edit", "write"}
    conversation = Conversation(turns[1].body["messages"])
    assert f"ns={namespace}" in conversation.last_tool_result()
    # The record contract comes from the image, with the host-issued namespace in it.
    system = Conversation(first["messages"]).system()
    assert f"records/<topic>/<slug>--{namespace}_<n>.md" in system
    assert "Never modify, rename or delete an existing record" in system
    assert "Write one note about the box" in Conversation(first["messages"]).user()

    repo = cli("knowledge", "yuko").stdout.strip()
    path = f"records/pi/first-note--{namespace}_1.md"
    note = note_landed_alone_by(repo, run, path)
    assert note.startswith(f"---\nid: {namespace}_1\n")
    assert git("-C", repo, "fsck", "--strict").returncode == 0


@pytest.mark.one_runtime
@pytest.mark.usefixtures("pi_image")
def test_a_pi_task_without_its_secret_fails_under_serve_and_runs_once_retried(
    cli: Cli, model: ModelServer
) -> None:
    """The model route's secret unset: the Pi imp's task is failed with the reason and
    serve --once exits 1, while a plain box imp's task lands; retried with the secret set,
    the Pi task runs."""
    set_up_owner(cli, model.url)
    note = (
        'printf "Acme ships SSO.\\n" | impyard-note vendors acme-sso --source https://example.com/a'
    )
    assert cli("imp", "create", "bo", "--command", note).code == 0
    pi_task = cli("task", "add", "yuko", "--prompt", "Write one note.").stdout.strip()
    box_task = cli("task", "add", "bo", "--prompt", "Write one note.").stdout.strip()
    served = cli("serve", "--once", timeout=300)
    assert served.code == 1, served.stdout + served.stderr
    assert "impyard: error: 1 task(s) failed" in served.stderr
    reason = "refusing to run imp 'yuko': route 'llm': IMPYARD_SECRET_LLM is not set on the host"
    assert f"task {pi_task} run - yuko: failed: {reason}" in served.stdout
    found = {t["id"]: t for t in json.loads(cli("task", "list", "--json").stdout)}
    assert (found[box_task]["state"], found[box_task]["checkpoint"]) == ("done", "integrated")
    assert found[pi_task]["state"] == "failed" and found[pi_task]["error"].startswith(reason)
    assert model.completions() == []

    assert cli("task", "retry", pi_task).code == 0
    served = cli("serve", "--once", env=agents.SECRET_ENV, timeout=300)
    assert served.code == 0, served.stdout + served.stderr
    shown = json.loads(cli("task", "show", pi_task, "--json").stdout)
    assert (shown["state"], shown["checkpoint"], shown["error"]) == ("done", "integrated", None)
    assert len(model.completions()) == 3


def spec_check_script(page_url: str) -> Script:
    """The spec's end-to-end imp check, then a note citing what it fetched."""
    probe = (
        'echo "TMPDIR=$TMPDIR"; echo "ns=$IMPYARD_KNOWLEDGE_NAMESPACE"; '
        "stat -f -c 'fstype=%T' /tmp; ls -la /tmp; "
        f"curl -sS --fail -o /tmp/page.html {page_url} && echo fetched; "
        "cat /tmp/page.html; "
        "if [ -e /opt/impyard/scratch ]; then echo scratch=present; else echo scratch=absent; fi"
    )

    def script(conversation: Conversation) -> Reply:
        if conversation.turn == 0:
            return Reply.call("bash", command=probe)
        seen = conversation.last_tool_result()
        match = NAMESPACE.search(seen)
        if conversation.turn == 1 and match and "fetched" in seen:
            return write_note(match.group(0), "internal", "page", page_url, "It says hello.\n")
        if conversation.turn == 1:
            return Reply.say("The download failed.")
        return Reply.say("Checked /tmp and wrote a note.")

    return script


@pytest.mark.usefixtures("pi_image")
def test_the_specs_end_to_end_check_under_serve_from_the_readme(cli: Cli, tmp_path: Path) -> None:
    marker = "impyard-internal-page-7f3c"
    with TlsPageServer(tmp_path / "tls", {"/page.html": f"<p>{marker}</p>\n".encode()}) as site:
        extra = (
            f'\n[[gateway.allow]]\nhost = "127.0.0.2"\nports = [{site.port}]\nmethods = ["GET"]\n'
        )
        with ModelServer(spec_check_script(site.url("/page.html"))) as model:
            set_up_owner(cli, model.url, extra=extra)
            # box.extra_ca_file sits in the [box] table of the org policy.
            ca_line = f'extra_ca_file = "{site.ca_file}"\n'
            edit_org(cli.home, 'network = "none"\n', f'network = "none"\n{ca_line}')
            assert cli("deploy").code == 0
            prompt = (
                "Print $TMPDIR, inspect /tmp, download the internal page into /tmp with curl, "
                "confirm /opt/impyard/scratch does not exist, and note what the page says."
            )
            assert cli("task", "add", "yuko", "--prompt", prompt).code == 0
            served = cli("serve", "--once", env=agents.SECRET_ENV, timeout=180)
            assert served.code == 0, served.stdout + served.stderr
            seen = Conversation(model.completions()[1].body["messages"]).last_tool_result()
    assert "TMPDIR=/tmp" in seen
    assert "fstype=tmpfs" in seen
    assert "fetched" in seen and marker in seen  # verified with the owner's CA, no -k
    assert "scratch=absent" in seen
    assert site.requests == [("GET", "/page.html")]

    runs = json.loads(cli("runs", "list", "--json").stdout)
    assert len(runs) == 1
    shown = json.loads(cli("runs", "show", runs[0]["run_id"], "--json").stdout)
    assert shown["checkpoint"] == "integrated"
    for key in ("base_commit", "namespace", "produced_commit", "validation_errors", "mode"):
        assert key in shown
    assert not [key for key in shown if "scratch" in key or "receipt" in key or "blob" in key]
    repo = cli("knowledge", "yuko").stdout.strip()
    assert marker not in git("-C", repo, "log", "-p", "main").stdout  # a note, not the page
    events = json_lines(cli("journal", "--run", shown["run_id"], "--json").stdout)
    fetches = [e for e in events if e["event"] == "gateway.request" and e["host"] == "127.0.0.2"]
    # Inspected HTTPS: the tunnel, and the GET judged inside it.
    assert sorted((f["method"], f["decision"]) for f in fetches) == [
        ("CONNECT", "allowed"),
        ("GET", "allowed"),
    ]


@pytest.mark.usefixtures("pi_image")
def test_the_provider_key_reaches_the_model_server_and_never_the_box(cli: Cli) -> None:
    probe = agents.secret_probe_script(agents.SECRET, show="$PI_CODING_AGENT_DIR/models.json")
    with ModelServer(probe) as model:
        set_up_owner(cli, model.url)
        code, run = agent_runs.run_json(cli, "yuko", "--prompt", "Look for the key.")
        turns = model.completions()
    assert code == 0, run
    seen = agents.probe_output_after_bearer_turns(turns)
    agents.assert_probe_found_no_secret(
        seen,
        "impyard-gateway-adds-the-key",  # Pi holds only the placeholder
        "IMPYARD_MODEL=scripted-model",
        "no_proxy=127.0.0.1,localhost,::1",
        cli=cli,
        run_id=str(run["run_id"]),
    )


def edit_existing_script() -> Script:
    """Find the record on main and change it with Pi's edit tool."""

    def script(conversation: Conversation) -> Reply:
        if conversation.turn == 0:
            return Reply.call("bash", command="cd $IMPYARD_KNOWLEDGE_DIR && ls records/*/*.md")
        if conversation.turn == 1:
            path = conversation.last_tool_result().split()[0]
            return Reply.call(
                "edit",
                path=f"/opt/impyard/knowledge/{path}",
                edits=[{"oldText": "# first-note", "newText": "# first-note (corrected)"}],
            )
        return Reply.say("Corrected the old note.")

    return script


@pytest.mark.one_runtime
@pytest.mark.usefixtures("pi_image")
def test_a_pi_that_modifies_an_existing_record_is_rejected(cli: Cli) -> None:
    def script(conversation: Conversation) -> Reply:
        chosen = edit_existing_script() if "Correct" in conversation.user() else note_script()
        return chosen(conversation)

    with ModelServer(script) as model:
        set_up_owner(cli, model.url)
        code, first = agent_runs.run_json(cli, "yuko", "--prompt", "Write a note.")
        assert code == 0 and first["checkpoint"] == "integrated", first
        repo = cli("knowledge", "yuko").stdout.strip()
        main_before = git("-C", repo, "rev-parse", "main").stdout
        code, second = agent_runs.run_json(cli, "yuko", "--prompt", "Correct the existing note.")
    assert code == 3, second
    assert second["checkpoint"] == "rejected"
    errors = second["validation_errors"]
    assert isinstance(errors, list)
    assert [(e["rule"], e["path"]) for e in errors] == [
        ("modified-existing", f"records/pi/first-note--{first['namespace']}_1.md")
    ]
    assert git("-C", repo, "rev-parse", "main").stdout == main_before
    assert git("-C", repo, "rev-parse", f"refs/candidates/{second['run_id']}").returncode == 0


def chatty_script() -> Script:
    """Three tool turns before an answer: more requests than a budget of two allows."""

    def script(conversation: Conversation) -> Reply:
        if conversation.turn < 3:
            return Reply.call("bash", command=f"echo step {conversation.turn}")
        return Reply.say("Done after three steps.")

    return script


@pytest.mark.usefixtures("pi_image")
def test_failing_hanging_and_over_budget_models_quarantine_legibly(cli: Cli) -> None:
    """Three imps under one serve: a provider answering 500, one that never answers (the
    box times out), and a budget of two requests. Each is quarantined with a reason an
    owner can act on and Pi's own output in `runs logs`."""
    failing = ModelServer(lambda conversation: Reply.error(500, "scripted provider outage"))
    hanging = ModelServer(lambda conversation: Reply.stall())
    with failing, hanging, ModelServer(chatty_script()) as chatty:
        servers = (failing, hanging, chatty)
        agent_runs.serve_failing_hanging_chatty(
            cli, set_up_owner, servers, header="Authorization", value="Bearer {secret}"
        )
        assert failing.completions() and hanging.completions()
        assert len(chatty.completions()) == 2  # the third request never left the gateway

    runs, shown = agent_runs.runs_by_imp(cli)
    agent_runs.assert_all_quarantined(shown)
    assert shown["failing"]["reason"] == "exited with status 1"
    assert "500 scripted provider outage" in cli("runs", "logs", runs["failing"]["run_id"]).stdout
    assert shown["hanging"]["timed_out"] is True
    assert shown["hanging"]["reason"] == "timed out and killed"
    budget_rule = "gateway.budget.requests_per_run"
    assert budget_rule in cli("runs", "logs", runs["thrifty"]["run_id"]).stdout
    events = json_lines(cli("journal", "--run", runs["thrifty"]["run_id"], "--json").stdout)
    refused = [e for e in events if e["event"] == "gateway.request" and e["status"] == 429]
    assert refused and all(e["rule"] == budget_rule for e in refused)


CHECKED_SLUG = "checked-note"
BAD_MARKER = "draft-without-an-id-7d1e"


def check_and_fix_script() -> Script:
    """Write a note without an ``id`` line, run impyard-check, fix exactly what it reports,
    check again, and finish only once it prints ok. The namespace comes from the system
    prompt. A step whose precondition is not in the last tool result ends the run with a
    reply that says so (the bad note stays, so the run is rejected and the test fails)."""

    def script(conversation: Conversation) -> Reply:
        match = NAMESPACE.search(conversation.system())
        if match is None:
            return Reply.say("UNEXPECTED: no namespace in the system prompt.")
        namespace = match.group(0)
        path = f"/opt/impyard/knowledge/records/pi/{CHECKED_SLUG}--{namespace}_1.md"
        violation = f"records/pi/{CHECKED_SLUG}--{namespace}_1.md: frontmatter: "
        seen = conversation.last_tool_result()
        if conversation.turn == 0:
            bad = (
                "---\ncreated_at: 2026-12-01T12:00:00Z\nsource_urls:\n"
                f"- https://example.com/{CHECKED_SLUG}\n---\n\n# {CHECKED_SLUG}\n\n"
                f"{BAD_MARKER}\n"
            )
            return Reply.call("write", path=path, content=bad)
        if conversation.turn in (1, 3):
            return Reply.call("bash", command="impyard-check")
        if conversation.turn == 2:
            if violation not in seen:
                return Reply.say(f"UNEXPECTED: impyard-check did not report the note: {seen!r}")
            url = f"https://example.com/{CHECKED_SLUG}"
            return write_note(namespace, "pi", CHECKED_SLUG, url, f"{agents.FIXED_MARKER}\n")
        if conversation.turn == 4 and "impyard-check: ok" in seen and violation not in seen:
            return Reply.say("Fixed the note; impyard-check prints ok.")
        return Reply.say(f"UNEXPECTED at turn {conversation.turn}: {seen!r}")

    return script


@pytest.mark.usefixtures("pi_image")
def test_pi_fixes_what_impyard_check_reports_before_it_finishes(cli: Cli) -> None:
    with ModelServer(check_and_fix_script()) as model:
        set_up_owner(cli, model.url)
        code, run = agent_runs.run_json(cli, "yuko", "--prompt", "Write one checked note.")
        turns = model.completions()
    namespace = str(run["namespace"])
    path = f"records/pi/{CHECKED_SLUG}--{namespace}_1.md"

    # Pi was told to check, saw the violation, fixed it and saw ok: five model turns.
    system = Conversation(turns[0].body["messages"]).system()
    assert "Before you finish, run impyard-check" in system
    assert "run it again until it prints ok" in system
    assert len(turns) == 5, [Conversation(t.body["messages"]).last_tool_result() for t in turns]
    first_check = Conversation(turns[2].body["messages"]).last_tool_result()
    assert f"{path}: frontmatter: frontmatter 'id' is missing" in first_check, first_check
    assert "impyard-check: 1 violation(s)" in first_check, first_check
    assert "exited with code 1" in first_check, first_check  # impyard-check's exit status
    second_check = Conversation(turns[4].body["messages"]).last_tool_result()
    assert "impyard-check: ok (1 record(s)" in second_check, second_check
    assert "frontmatter" not in second_check and "exited with code" not in second_check
    final = Conversation(turns[4].body["messages"])
    assert final.tool_results()[-3] == first_check  # the order Pi saw them in

    assert code == 0, run
    assert run["checkpoint"] == "integrated", run
    assert run["validation_errors"] == [], run
    repo = cli("knowledge", "yuko").stdout.strip()
    note = note_landed_alone_by(repo, run, path)
    assert note.startswith(f"---\nid: {namespace}_1\ncreated_at: ")
    assert agents.FIXED_MARKER in note
    assert BAD_MARKER not in git("-C", repo, "log", "-p", "main").stdout

    # Both checks went through this run's gateway, answered and journaled.
    events = json_lines(cli("journal", "--run", str(run["run_id"]), "--json").stdout)
    checks = [
        (e["method"], e["rule"], e["decision"], e["status"])
        for e in events
        if e["event"] == "gateway.request" and e.get("path") == "/impyard/check"
    ]
    assert checks == [("GET", "impyard.control", "allowed", 200)] * 2, events


@pytest.mark.usefixtures("pi_image")
def test_a_rejected_pi_note_is_reworked_by_pi_and_lands_once(cli: Cli) -> None:
    with ModelServer(agents.titled_then_rework_script("pi", read_first=False)) as model:
        set_up_owner(cli, model.url, imps=())
        # The image under test (IMPYARD_TEST_PI_IMAGE): its adapter holds the contract.
        assert cli("imp", "create", "yuko", "--agent", "pi", "--image", PI_IMAGE).code == 0
        agent_runs.serve_one_reworked_task(cli)
        turns = [Conversation(t.body["messages"]) for t in model.completions()]

    rework = agent_runs.rework_of_rejected(cli, "pi")
    # What Pi was told in the rework run: what a rework is, and the violation by its new name.
    contract = ("A rework task", "do not finish until impyard-check prints ok")
    agent_runs.assert_rework_told(
        turns, rework, count=3, told_also=("> Write one note.",), contract=contract
    )
    agent_runs.assert_rework_landed_once(cli, "pi", rework, sole=True)
