"""`impyard run` wires the governed gateway into the box, through the real CLI."""

from __future__ import annotations

import hashlib
import http.server
import json
import threading
from collections.abc import Iterator

import pytest

from tests.helpers.cli import Cli, json_lines
from tests.helpers.policy import edit_org
from tests.helpers.warm import ready_count, remove_pool_boxes, serving, wait_for

pytestmark = pytest.mark.docker


class Upstream(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"hello from upstream\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        del format, args


@pytest.fixture
def upstream() -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def test_run_reaches_an_allowed_upstream_only_through_the_gateway(cli: Cli, upstream: int) -> None:
    assert cli("init").code == 0
    org = cli.home / "policy" / "org.toml"
    org.write_text(
        org.read_text()
        + f'\n[[gateway.allow]]\nhost = "127.0.0.1"\nports = [{upstream}]\nmethods = ["GET"]\n'
    )
    deployed = cli("deploy")
    assert deployed.code == 0, deployed.stderr
    assert cli("imp", "create", "yuko").code == 0
    script = (
        f"wget -q -O - http://127.0.0.1:{upstream}/allowed?secret=1; echo rc=$?; "
        "wget -q -O - http://example.com/ 2>&1; echo rc=$?"
    )
    result = cli("run", "yuko", "--prompt", "fetch", "--command", script, "--json")
    assert result.code == 0, result.stderr
    run_id = json.loads(result.stdout)["run_id"]
    logs = cli("runs", "logs", run_id).stdout
    assert "hello from upstream" in logs
    assert "403" in logs
    events = json_lines(cli("journal", "--run", run_id, "--json").stdout)
    # Each request is journaled when it ends: the relayed one after its upstream closed,
    # which can be after the box's next (refused) request was answered.
    requests = sorted(
        (e for e in events if e["event"] == "gateway.request"), key=lambda e: e["decision"]
    )
    assert [(r["host"], r["decision"]) for r in requests] == [
        ("127.0.0.1", "allowed"),
        ("example.com", "refused"),
    ]
    assert requests[0]["path"] == "/allowed"  # the query is never journaled
    assert requests[1]["status"] == 403
    # The relayed response left a receipt (the refusal did not); its URL hides the secret.
    receipts = json.loads(cli("runs", "receipts", run_id, "--json").stdout)
    assert [r["url"] for r in receipts] == [f"http://127.0.0.1:{upstream}/allowed?secret=REDACTED"]
    assert receipts[0]["id"] == requests[0]["receipt"] and receipts[0]["complete"] is True
    assert receipts[0]["sha256"] == hashlib.sha256(b"hello from upstream\n").hexdigest()


def test_a_box_imp_runs_while_a_route_it_never_names_has_no_secret(cli: Cli, upstream: int) -> None:
    """Only an imp whose runs call a route is refused for its missing secret; a plain box
    imp runs, and a request it makes on that route is answered 502 naming the secret."""
    assert cli("init").code == 0
    org = cli.home / "policy" / "org.toml"
    org.write_text(
        org.read_text()
        + f'\n[[gateway.route]]\nname = "llm"\nupstream = "http://127.0.0.1:{upstream}"\n'
        'header = "Authorization"\nvalue = "Bearer {secret}"\n'
        'secret_env = "IMPYARD_SECRET_UNSET_LLM"\n'
    )
    deployed = cli("deploy")
    assert deployed.code == 0, deployed.stderr
    assert "IMPYARD_SECRET_UNSET_LLM is not set on the host" in deployed.stderr
    assert cli("imp", "create", "yuko").code == 0
    script = (
        "wget -q -O - http://127.0.0.1:3128/route/llm/v1/models 2>&1; echo rc=$?; "
        'printf "Acme ships SSO.\\n" | impyard-note vendors acme-sso --source https://example.com/acme'
    )
    result = cli("run", "yuko", "--prompt", "note", "--command", script, "--json")
    assert result.code == 0, result.stderr
    run = json.loads(result.stdout)
    assert run["checkpoint"] == "integrated", run
    assert "rc=1" in cli("runs", "logs", run["run_id"]).stdout
    (request,) = [
        e
        for e in json_lines(cli("journal", "--run", run["run_id"], "--json").stdout)
        if e["event"] == "gateway.request"
    ]
    assert (request["route"], request["status"]) == ("llm", 502), request
    assert "IMPYARD_SECRET_UNSET_LLM is not set on the host" in request["reason"], request


def test_a_run_on_a_ready_box_reaches_its_gateway_at_its_first_instruction(
    cli: Cli, upstream: int
) -> None:
    """A ready box starts the run's command as soon as its claim says so, with no wait of
    its own: the gateway must already listen in the box's network namespace by then."""
    assert cli("init").code == 0
    edit_org(cli.home, "boxes = 0", "boxes = 1")
    org = cli.home / "policy" / "org.toml"
    org.write_text(
        org.read_text()
        + f'\n[[gateway.allow]]\nhost = "127.0.0.1"\nports = [{upstream}]\nmethods = ["GET"]\n'
    )
    assert cli("deploy").code == 0
    assert cli("imp", "create", "yuko").code == 0
    script = f"wget -q -O - http://127.0.0.1:{upstream}/first; echo rc=$?"
    first = cli("run", "yuko", "--prompt", "fetch", "--command", script, "--json")
    assert json.loads(first.stdout)["warm"] is False, first.stdout  # it teaches serve the shape
    try:
        with serving(cli.home):
            wait_for("a ready box", lambda: ready_count(cli.home) >= 1)
            result = cli("run", "yuko", "--prompt", "fetch", "--command", script, "--json")
    finally:
        remove_pool_boxes(cli.home)
    assert result.code == 0, result.stderr
    run = json.loads(result.stdout)
    assert run["warm"] is True, run
    logs = cli("runs", "logs", run["run_id"]).stdout
    assert "hello from upstream" in logs and "rc=0" in logs, logs
