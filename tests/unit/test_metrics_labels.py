"""``/metrics`` names no host: a scraper let in with ``--metrics-public`` learns the policy's
rules by index and the owner's route names, never the hosts they grant."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from prometheus_client.parser import text_string_to_metric_families

from impyard.home import Home
from tests.helpers.cli import Cli
from tests.helpers.gateway import SECRET, serve_on_loopback, via_proxy
from tests.helpers.policy import edit_org
from tests.helpers.upstream import Upstream
from tests.helpers.web import console_for


def _labels(text: str) -> dict[tuple[str, str], set[str]]:
    """Every label value of every sample, by metric and label name."""
    found: dict[tuple[str, str], set[str]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            for name, value in sample.labels.items():
                found.setdefault((sample.name, name), set()).add(value)
    return found


def test_no_metric_label_holds_a_host_the_policy_names(
    cli: Cli, tmp_path: Path, upstream: Upstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert cli("init").code == 0
    monkeypatch.setenv("IMPYARD_TEST_GATEWAY_SECRET", SECRET)
    served = serve_on_loopback(tmp_path, upstream)
    policy = served.gateway.policy
    hosts = {rule.host for rule in policy.allow} | {
        urlsplit(route.upstream).hostname or "" for route in policy.route
    }
    assert hosts == {"127.0.0.1", "localhost"}
    try:
        gw = served.port
        assert via_proxy(gw, "GET", upstream.url("/page"))[0] == 200  # gateway.allow[0]
        assert via_proxy(gw, "POST", upstream.url("/form"), body=b"a=1")[0] == 403
        # gateway.allow[1] grants localhost; the name resolving to loopback is refused.
        assert via_proxy(gw, "GET", f"http://localhost:{upstream.port}/")[0] == 403
        route = f"http://127.0.0.1:{gw}/route/llm/models"
        assert via_proxy(gw, "GET", route)[0] == 200
    finally:
        served.gateway.close()
    rules = {entry["rule"] for entry in served.journal.read(event="gateway.request")}
    # The journal, read by the owner, keeps naming the host a rule grants.
    assert {"gateway.allow[0] 127.0.0.1", "gateway.allow[1] localhost"} <= rules

    _, client = console_for(cli.home, metrics_public=True)
    labels = _labels(client.get("/metrics").text)
    leaks = {
        (metric, name, value)
        for (metric, name), values in labels.items()
        for value in values
        for host in hosts
        if host in value
    }
    assert leaks == set()
    requests = labels[("impyard_gateway_requests_total", "rule")]
    assert requests == {"gateway.allow[0]", "gateway.allow[1]", "gateway.route llm"}
    assert labels[("impyard_gateway_requests_total", "route")] == {"none", "llm"}
    assert labels[("impyard_gateway_requests_total", "decision")] == {"allow", "deny"}


def test_backup_lag_names_a_remote_by_its_index_never_its_url(cli: Cli) -> None:
    assert cli("init").code == 0
    assert cli("imp", "create", "yuko").code == 0
    remote = "https://backup.example.com/yard/"
    edit_org(cli.home, "[backup]\nremotes = []", f'[backup]\nremotes = ["/srv/a", "{remote}"]')
    assert cli("deploy").code == 0
    home = Home(cli.home)
    home.backup_status.parent.mkdir(parents=True, exist_ok=True)
    pushed = {"pushed_at": "2026-07-11T12:00:00Z", "pushed_main": "0" * 40}
    home.backup_status.write_text(json.dumps({"yuko": {remote: pushed, "/srv/a": pushed}}))

    _, client = console_for(cli.home, metrics_public=True)
    text = client.get("/metrics").text
    assert "backup.example.com" not in text and "/srv/a" not in text
    labels = _labels(text)
    assert labels[("impyard_backup_last_push_age_seconds", "remote")] == {
        "backup.remotes[0]",
        "backup.remotes[1]",
    }
