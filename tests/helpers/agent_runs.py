"""Flows every agent's docker tests share: ``impyard run --json``; three imps whose models
fail, hang and overrun a budget under one serve; and the rework flow, where a note written
with a key records may not have is rejected, one rework run is allowed, and the agent's
fix lands once. The agent-specific parts (its model servers, its route's header, what its
logs and contract say) stay in each test."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from impyard.devtools.model_server import Conversation, ModelServer
from tests.helpers.agents import FIXED_MARKER, REWORK_SLUG, SECRET_ENV, TITLED_MARKER
from tests.helpers.cli import Cli, json_lines
from tests.helpers.follow import impyard_command, impyard_env
from tests.helpers.git import git
from tests.helpers.policy import edit_org

QUARANTINED_IMPS = ("failing", "hanging", "thrifty")


def run_json(cli: Cli, *args: str, timeout: float = 180) -> tuple[int, dict[str, Any]]:
    """``impyard run ARGS --json`` with the provider key set: its exit code and record."""
    result = cli("run", *args, "--json", env=SECRET_ENV, timeout=timeout)
    assert result.stdout.strip().startswith("{"), result.stderr
    return result.code, json.loads(result.stdout)


def start_run(cli: Cli, *args: str) -> subprocess.Popen[bytes]:
    """``impyard run yuko ARGS`` started with the provider key set, its output piped."""
    return subprocess.Popen(
        impyard_command(cli.home, "run", "yuko", *args),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**impyard_env(), **SECRET_ENV},
    )


@dataclass(frozen=True)
class Live:
    """What a run printed, and whether the watched line came while it was still going
    (None: it never came)."""

    out: bytes
    err: bytes
    line_while_running: bool | None


def follow_live(proc: subprocess.Popen[bytes], watch: bytes, timeout: float) -> Live:
    """Read ``proc``'s output line by line as it comes (the owner's terminal), noting
    whether the first line starting with ``watch`` arrived before ``proc`` ended."""
    assert proc.stdout is not None
    seen: list[bytes] = []
    line_while_running = None
    for line in proc.stdout:
        seen.append(line)
        if line_while_running is None and line.startswith(watch):
            line_while_running = proc.poll() is None
    err = proc.communicate(timeout=timeout)[1]
    return Live(b"".join(seen), err, line_while_running)


def run_showing_steps_live(cli: Cli, watch: bytes, *args: str, timeout: float = 180) -> str:
    """``impyard run yuko ARGS`` read as the owner's terminal shows it: it exits 0, and the
    first line starting with ``watch`` reached the owner while the run was still in its
    box. What it printed."""
    proc = start_run(cli, *args)
    live = follow_live(proc, watch, timeout=timeout)
    out = live.out.decode(errors="replace")
    assert proc.returncode == 0, out + live.err.decode(errors="replace")
    assert live.line_while_running, out
    return out


def assert_note_run_integrated(cli: Cli, first: Conversation, prompt: str) -> tuple[str, str]:
    """yuko's latest run integrated after three agent steps, and its first model turn held
    ``prompt`` and the record contract under the run's namespace. The run's id and
    namespace."""
    run = json.loads(cli("runs", "list", "--json").stdout)[0]
    shown = json.loads(cli("runs", "show", run["run_id"], "--json").stdout)
    namespace = shown["namespace"]
    assert f"records/<topic>/<slug>--{namespace}_<n>.md" in first.system()
    assert prompt in first.user()
    assert shown["checkpoint"] == "integrated", shown
    assert shown["agent_steps"] == 3
    return run["run_id"], namespace


def assert_first_note_landed_asking_only_the_model(
    cli: Cli, topic: str, run_id: str, namespace: str, model_path: str
) -> None:
    """The run's one commit on yuko's main added ``records/<topic>/first-note`` under its
    namespace, and nothing but POSTs to ``model_path`` and the host's report left its box:
    an agent that phones home (updates, telemetry) fails here."""
    repo = cli("knowledge", "yuko").stdout.strip()
    path = f"records/{topic}/first-note--{namespace}_1.md"
    assert git("-C", repo, "log", "-1", "--name-only", "--format=").stdout.split() == [path]
    assert git("-C", repo, "show", f"main:{path}").stdout.startswith(f"---\nid: {namespace}_1\n")
    events = json_lines(cli("journal", "--run", run_id, "--json").stdout)
    requests = [e for e in events if e["event"] == "gateway.request"]
    assert {(e["method"], e.get("path"), e["decision"]) for e in requests} == {
        ("POST", model_path, "allowed"),
        ("POST", "/impyard/report", "allowed"),
    }, requests


def serve_failing_hanging_chatty(
    cli: Cli,
    set_up_owner: Callable[..., None],
    servers: tuple[ModelServer, ModelServer, ModelServer],
    *,
    header: str,
    value: str,
    hang_seconds: int = 25,
) -> None:
    """Imps failing, hanging and thrifty asking the ``servers`` (failing, hanging, chatty)
    through routes that send the key as ``header: value``; the hanging box gets
    ``hang_seconds``, the thrifty one a budget of two requests. One task each, served at
    once. ``hang_seconds`` is long enough for the agent to start and ask on a loaded
    machine (parallel tests, gVisor): a box killed before it asked would show nothing
    about a hanging model."""
    failing, hanging, chatty = servers
    routes = "".join(
        f'\n[[gateway.route]]\nname = "{name}"\nupstream = "{server.url}"\n'
        f'header = "{header}"\nvalue = "{value}"\n'
        'secret_env = "IMPYARD_SECRET_LLM"\nmethods = ["POST"]\nallow_private = true\n'
        for name, server in (("llm-hang", hanging), ("llm-chatty", chatty))
    )
    set_up_owner(cli, failing.url, extra=routes, imps=QUARANTINED_IMPS)
    overlays = cli.home / "policy" / "imps"
    overlays.mkdir(exist_ok=True)
    (overlays / "hanging.toml").write_text(
        f'[box]\ntimeout_seconds = {hang_seconds}\n\n[box.env]\nIMPYARD_MODEL_ROUTE = "llm-hang"\n'
    )
    (overlays / "thrifty.toml").write_text(
        '[box.env]\nIMPYARD_MODEL_ROUTE = "llm-chatty"\n\n[gateway.budget]\nrequests_per_run = 2\n'
    )
    deployed = cli("deploy")
    assert deployed.code == 0, deployed.stdout
    for imp in QUARANTINED_IMPS:
        assert cli("task", "add", imp, "--prompt", "Do some research.").code == 0
    served = cli("serve", "--once", "--concurrency", "3", env=SECRET_ENV, timeout=240)
    assert served.code == 0, served.stdout + served.stderr


def runs_by_imp(cli: Cli) -> tuple[dict[str, Any], dict[str, Any]]:
    """Each imp's run as ``runs list`` and as ``runs show`` give it."""
    runs = {r["imp"]: r for r in json.loads(cli("runs", "list", "--json").stdout)}
    shown = {
        imp: json.loads(cli("runs", "show", run["run_id"], "--json").stdout)
        for imp, run in runs.items()
    }
    return runs, shown


def assert_all_quarantined(shown: dict[str, Any]) -> None:
    assert {imp: s["checkpoint"] for imp, s in shown.items()} == dict.fromkeys(
        QUARANTINED_IMPS, "quarantined"
    )


@dataclass(frozen=True)
class Rework:
    """The rejected run, its rework run, and the note's path the rework names."""

    first: str
    second: str
    path: str


def serve_one_reworked_task(cli: Cli) -> None:
    """Allow one rework, queue one task for yuko and serve it once: the rejected run and
    its rework both run."""
    edit_org(cli.home, "rework_attempts = 0", "rework_attempts = 1")
    assert cli("deploy").code == 0
    assert cli("task", "add", "yuko", "--prompt", "Write one note.").code == 0
    served = cli("serve", "--once", env=SECRET_ENV, timeout=300)
    assert served.code == 0, served.stdout + served.stderr


def rework_of_rejected(cli: Cli, topic: str, *, show_logs: bool = False) -> Rework:
    """The first run was rejected and its rework integrated; the note's path under the
    rework run's namespace. ``show_logs``: a rework that did not integrate shows its logs."""
    first, second = json.loads(cli("task", "list", "--json").stdout)
    assert first["checkpoint"] == "rejected", first
    assert second["rework_of"] == first["run_id"], second
    why = cli("runs", "logs", second["run_id"]).stdout if show_logs else second
    assert second["checkpoint"] == "integrated", why
    namespace = json.loads(cli("runs", "show", second["run_id"], "--json").stdout)["namespace"]
    path = f"records/{topic}/{REWORK_SLUG}--{namespace}_1.md"
    return Rework(first["run_id"], second["run_id"], path)


def assert_rework_told(
    turns: Sequence[Conversation],
    rework: Rework,
    *,
    count: int,
    told_also: Sequence[str] = (),
    contract: Sequence[str] = (),
) -> None:
    """The rework run took ``count`` model turns; its task named the rejected run (and
    ``told_also``) and the violation by the note's new name; its system prompt holds each
    of ``contract``; its last tool result is impyard-check's ok."""
    reworked = [c for c in turns if "# Rework of run" in c.user()]
    assert len(reworked) == count, [c.user()[:80] for c in turns]
    told = reworked[0].user()
    assert f"# Rework of run {rework.first}" in told
    for phrase in told_also:
        assert phrase in told
    assert f"- {rework.path}: frontmatter: " in told and "unknown key 'title'" in told
    system = " ".join(reworked[0].system().split())
    for phrase in contract:
        assert phrase in system
    assert "impyard-check: ok" in reworked[-1].last_tool_result()


def assert_rework_landed_once(cli: Cli, topic: str, rework: Rework, *, sole: bool = False) -> None:
    """One commit under records/<topic> on yuko's main, trailed as the rework of the
    rejected run, holding the fixed note (``sole``: and no other file under it)."""
    repo = cli("knowledge", "yuko").stdout.strip()
    landed = git("-C", repo, "log", "--format=%H", "main", "--", f"records/{topic}").stdout.split()
    assert len(landed) == 1
    message = git("-C", repo, "log", "-1", "--format=%B", landed[0]).stdout
    assert f"Impyard-Rework-Of: {rework.first}" in message
    if sole:
        files = git("-C", repo, "ls-tree", "-r", "--name-only", "main", f"records/{topic}")
        assert files.stdout.split() == [rework.path]
    note = git("-C", repo, "show", f"main:{rework.path}").stdout
    assert FIXED_MARKER in note and "title:" not in note and TITLED_MARKER not in note
