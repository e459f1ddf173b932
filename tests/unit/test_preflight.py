"""What would fail every run is said before a box starts: a route's secret unset on the
host, an upstream that doubles /v1, a host name that resolves to loopback; values out of
range are refused, unknown imps named, every policy file's faults listed at once."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from impyard.gateway.guard.upstream import UpstreamError, open_connection
from impyard.home import Home
from impyard.preflight import imps_refused
from tests.helpers.cli import Cli
from tests.helpers.policy import route_toml

SECRET = "IMPYARD_SECRET_PREFLIGHT"


def route(upstream: str, *extra: str) -> str:
    return route_toml(upstream, SECRET, *extra, value="Bearer {secret}")


def with_route(cli: Cli, text: str) -> None:
    org = cli.home / "policy" / "org.toml"
    org.write_text(org.read_text() + text)


def calls_route(cli: Cli, imp: str, name: str = "llm") -> None:
    """The imp's overlay names the route its model calls go to: its runs use that route."""
    overlay = cli.home / "policy" / "imps" / f"{imp}.toml"
    overlay.write_text(f'[box.env]\nIMPYARD_MODEL_ROUTE = "{name}"\n')


def run(cli: Cli, *args: str, env: dict[str, str] | None = None) -> tuple[int, list[str]]:
    result = cli("run", "yuko", "--prompt", "hi", *args, env=env)
    return result.code, result.stderr.splitlines()


def test_a_missing_secret_is_one_line_before_any_box_and_deploy_warns(yuko: Cli) -> None:
    with_route(yuko, route("https://api.example.com"))
    calls_route(yuko, "yuko")
    deployed = yuko("deploy")
    assert deployed.code == 0, deployed.stderr
    assert f"impyard: warning: route 'llm': {SECRET} is not set on the host" in deployed.stderr
    code, lines = run(yuko)
    assert code != 0
    assert lines == [
        f"impyard: error: refusing to run imp 'yuko': route 'llm': {SECRET} is not set on "
        "the host (the gateway adds it to every request of this route)"
    ]
    assert not (yuko.home / "runs").exists() or not any((yuko.home / "runs").iterdir())
    # With the secret set the run passes the check (and stops at the next one here).
    code, lines = run(yuko, "--timeout", "999999", env={SECRET: "s3cret"})
    assert (
        code == 2 and "--timeout 999999 is over the box.timeout_seconds of imp 'yuko'" in lines[0]
    )
    document = json.loads(yuko("deploy", "--json", env={SECRET: "s3cret"}).stdout)
    assert document["warnings"] == []
    assert document["routes"] == [
        {
            "route": "llm",
            "upstream": "https://api.example.com",
            "secret": f"env {SECRET}",
            "allow_private": False,
        }
    ]


def test_only_imps_whose_runs_call_the_route_are_refused(yuko: Cli) -> None:
    """A plain command imp calls no route it does not name; a Pi imp calls its model route,
    ``llm`` unless IMPYARD_MODEL_ROUTE names another."""
    with_route(yuko, route("https://api.example.com"))
    assert yuko("imp", "create", "pia", "--agent", "pi").code == 0
    assert yuko("deploy").code == 0
    # Past the route check, stopped at the next one (the timeout): not refused for llm.
    code, lines = run(yuko, "--timeout", "999999")
    assert code == 2 and "box.timeout_seconds" in lines[0], lines
    refused = yuko("run", "pia", "--prompt", "hi")
    assert refused.code != 0
    assert refused.stderr.startswith("impyard: error: refusing to run imp 'pia': route 'llm': ")
    # The owner's --command replaces the agent: its run calls no route of Pi's.
    own = yuko("run", "pia", "--prompt", "hi", "--command", "true", "--timeout", "999999")
    assert own.code == 2 and "box.timeout_seconds" in own.stderr, own.stderr
    calls_route(yuko, "pia", "local")
    assert yuko("deploy").code == 0
    moved = yuko("run", "pia", "--prompt", "hi", "--timeout", "999999")
    assert moved.code == 2 and "box.timeout_seconds" in moved.stderr, moved.stderr
    # serve names at start only the imps it will refuse.
    calls_route(yuko, "pia", "llm")
    assert yuko("deploy").code == 0
    assert [line.split(":")[0] for line in imps_refused(Home(yuko.home))] == [
        "refusing to run imp 'pia'"
    ]


def test_status_warns_of_a_missing_secret(yuko: Cli) -> None:
    with_route(yuko, route("https://api.example.com"))
    assert yuko("deploy").code == 0
    shown = json.loads(yuko("status", "--json").stdout)
    assert {
        "code": "secret-missing",
        "message": f"route 'llm': {SECRET} is not set on the "
        "host (the gateway adds it to every request of this route)",
    } in shown["warnings"]


def test_an_upstream_that_doubles_v1_is_caught(yuko: Cli) -> None:
    with_route(yuko, route("https://api.example.com/v1/"))
    deployed = yuko("deploy", env={SECRET: "s"})
    assert "ends in /v1" in deployed.stderr and "/v1/v1/chat/completions" in deployed.stderr
    # An imp running Pi (which adds /v1 itself) is refused; a command of the owner's is not.
    code, lines = run(yuko, "--timeout", "999999", env={SECRET: "s"})
    assert "box.timeout_seconds" in lines[0]
    assert yuko("imp", "set", "yuko", "--agent", "pi").code == 0
    code, lines = run(yuko, env={SECRET: "s"})
    assert code != 0 and len(lines) == 1
    assert "refusing to run imp 'yuko'" in lines[0] and "drop /v1 from the upstream" in lines[0]


def test_a_loopback_upstream_is_refused_then_allowed_with_the_key(yuko: Cli) -> None:
    with_route(yuko, route("http://localhost:11434"))
    calls_route(yuko, "yuko")
    deployed = yuko("deploy", env={SECRET: "s"})
    assert "upstream host localhost resolves to non-public" in deployed.stderr
    assert "set allow_private = true on the route" in deployed.stderr
    code, lines = run(yuko, env={SECRET: "s"})
    assert code != 0 and "resolves to non-public" in lines[0]

    org = yuko.home / "policy" / "org.toml"
    org.write_text(org.read_text().replace('11434"\n', '11434"\nallow_private = true\n'))
    deployed = yuko("deploy", env={SECRET: "s"})
    assert deployed.code == 0 and deployed.stderr == ""
    header, row = deployed.stdout.splitlines()[-2:]
    assert header.split() == ["route", "upstream", "secret", "private"]
    assert row.split() == ["llm", "http://localhost:11434", "env", SECRET, "allowed"]
    code, lines = run(yuko, "--timeout", "999999", env={SECRET: "s"})
    assert "box.timeout_seconds" in lines[0]


def test_the_gateway_reaches_a_name_resolving_to_loopback_only_when_allowed() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        with pytest.raises(UpstreamError, match="resolves to non-public") as refused:
            open_connection("localhost", port, timeout=5)
        assert refused.value.refused
        open_connection("localhost", port, timeout=5, allow_private=True).close()


def test_an_unknown_imp_is_named(yuko: Cli) -> None:
    shown = yuko("policy", "show", "nobody")
    assert shown.code == 2
    assert shown.stderr.startswith("impyard: error: no imp named 'nobody'")


def test_deploy_lists_the_errors_of_org_and_overlays_together(yuko: Cli, tmp_path: Path) -> None:
    org = yuko.home / "policy" / "org.toml"
    org.write_text(org.read_text().replace("pids_limit = 256", 'pids_limit = "many"'))
    overlay = yuko.home / "policy" / "imps" / "yuko.toml"
    overlay.write_text("[box]\ncpus = -3\n")
    deployed = yuko("deploy")
    assert deployed.code != 0
    assert "org.toml" in deployed.stderr and "box.pids_limit" in deployed.stderr
    assert "yuko.toml" in deployed.stderr and "box.cpus" in deployed.stderr


def test_runs_list_of_a_name_that_never_ran_says_so(yuko: Cli) -> None:
    listed = yuko("runs", "list", "--imp", "nobody")
    assert listed.code == 2 and "no imp named 'nobody' and no runs of it" in listed.stderr
    assert yuko("runs", "list", "--imp", "yuko").code == 0
