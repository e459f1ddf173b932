from __future__ import annotations

from typing import Any

import pytest

from impyard.errors import ConfigError
from impyard.gateway.errors import GatewayError
from impyard.gateway.rules import GatewayRules

ISSUE_EXAMPLE: dict[str, Any] = {
    "enabled": True,
    "port": 3128,
    "allow": [
        {"host": "docs.example.com", "ports": [80, 443], "methods": ["GET", "HEAD"]},
        {"host": "*.example.org", "ports": [443], "methods": ["GET"]},
        {"host": "api.example.net", "ports": [80], "methods": ["GET"]},
        {"host": "api.example.net", "ports": [80], "methods": ["POST"]},
    ],
    "route": [
        {
            "name": "llm",
            "upstream": "https://api.example.com/v1/",
            "header": "Authorization",
            "value": "Bearer {secret}",
            "secret_env": "IMPYARD_TEST_SECRET_LLM",
            "methods": ["POST"],
        }
    ],
    "budget": {
        "requests_per_run": 500,
        "response_bytes_per_run": 104857600,
        "requests_per_imp_per_day": 5000,
    },
}


@pytest.fixture
def rules() -> GatewayRules:
    return GatewayRules.from_dict(ISSUE_EXAMPLE)


def test_from_dict_builds_the_issue_example(rules: GatewayRules) -> None:
    assert rules.enabled and rules.port == 3128
    assert [r.host for r in rules.allow][:2] == ["docs.example.com", "*.example.org"]
    assert rules.routes[0].host == "api.example.com" and rules.routes[0].port == 443
    assert rules.budget.requests_per_run == 500
    assert rules.budget.requests_per_imp_per_day == 5000


def test_exact_host_port_and_method(rules: GatewayRules) -> None:
    ok = rules.decide("GET", "docs.example.com", 80, "/a")
    assert ok.allowed and ok.rule == "gateway.allow[0] docs.example.com"
    assert rules.decide("head", "DOCS.Example.COM.", 80, "/").allowed
    assert not rules.decide("GET", "docs.example.com", 8080, "/").allowed
    assert not rules.decide("GET", "evil.docs.example.com", 80, "/").allowed


def test_method_refusal_names_the_rule(rules: GatewayRules) -> None:
    post = rules.decide("POST", "docs.example.com", 80, "/")
    assert not post.allowed and post.status == 403
    assert post.rule == "gateway.allow[0] docs.example.com"
    assert "POST" in post.reason and "GET, HEAD" in post.reason


def test_wildcard_is_subdomains_only(rules: GatewayRules) -> None:
    assert rules.decide("GET", "a.example.org", 443, "/").allowed
    assert rules.decide("GET", "a.b.example.org", 443, "/").allowed
    assert not rules.decide("GET", "example.org", 443, "/").allowed
    assert not rules.decide("GET", "badexample.org", 443, "/").allowed


def test_connect_checks_host_and_port_only(rules: GatewayRules) -> None:
    # docs.example.com allows GET/HEAD only, yet CONNECT is judged by endpoint.
    assert rules.decide("CONNECT", "docs.example.com", 443, "").allowed
    assert not rules.decide("CONNECT", "docs.example.com", 22, "").allowed
    assert not rules.decide("CONNECT", "example.com", 443, "").allowed


def test_first_match_wins_and_later_rules_can_grant(rules: GatewayRules) -> None:
    get = rules.decide("GET", "api.example.net", 80, "/")
    assert get.rule == "gateway.allow[2] api.example.net"
    post = rules.decide("POST", "api.example.net", 80, "/")
    assert post.allowed and post.rule == "gateway.allow[3] api.example.net"


def test_default_deny(rules: GatewayRules) -> None:
    denied = rules.decide("GET", "example.com", 80, "/")
    assert not denied.allowed and denied.status == 403 and denied.rule == "default-deny"
    assert "example.com:80" in denied.reason
    assert not GatewayRules.from_dict({}).decide("GET", "docs.example.com", 80, "/").allowed


def test_routes(rules: GatewayRules) -> None:
    ok = rules.decide("POST", "127.0.0.1", 3128, "/route/llm/chat/completions")
    assert ok.allowed and ok.route is not None and ok.route.name == "llm"
    assert ok.path == "/v1/chat/completions" and ok.rule == "gateway.route llm"
    get = rules.decide("GET", "localhost", 3128, "/route/llm/x")
    assert not get.allowed and get.rule == "gateway.route llm" and "POST" in get.reason
    assert not rules.decide("POST", "127.0.0.1", 3128, "/route/other/x").allowed
    assert not rules.decide("GET", "127.0.0.1", 3128, "/").allowed
    assert not rules.decide("CONNECT", "127.0.0.1", 3128, "").allowed
    assert not rules.decide("POST", "127.0.0.1", 3128, "/route/llm/../admin").allowed
    assert not rules.decide("POST", "127.0.0.1", 3128, "/route/llm/%2e%2e/admin").allowed
    # Another port on 127.0.0.1 is an ordinary upstream, judged by allow rules.
    assert not rules.decide("POST", "127.0.0.1", 8080, "/route/llm/x").allowed


def test_route_secret_is_read_at_request_time(
    rules: GatewayRules, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    route = rules.routes[0]
    with pytest.raises(GatewayError, match="IMPYARD_TEST_SECRET_LLM is not set"):
        route.header_value()
    monkeypatch.setenv("IMPYARD_TEST_SECRET_LLM", "s3cret")
    assert route.header_value() == "Bearer s3cret"
    monkeypatch.setenv("IMPYARD_TEST_SECRET_LLM", "s3\r\nX-Evil: 1")
    with pytest.raises(GatewayError, match="line break"):
        route.header_value()
    secret_file = tmp_path / "secret"
    secret_file.write_text("from-file\n")
    data = {**ISSUE_EXAMPLE, "route": [{**ISSUE_EXAMPLE["route"][0]}]}
    del data["route"][0]["secret_env"]
    data["route"][0]["secret_file"] = str(secret_file)
    assert GatewayRules.from_dict(data).routes[0].header_value() == "Bearer from-file"


@pytest.mark.parametrize(
    "bad",
    [
        {"port": 0},
        {"allow": [{"host": ""}]},
        {"allow": [{"host": "a.*.com"}]},
        {"allow": [{"host": "x.com", "ports": [70000]}]},
        {"allow": {"host": "x.com"}},
        {"route": [{"name": "r", "upstream": "ftp://x", "header": "A", "secret_env": "E"}]},
        {"route": [{"name": "r", "upstream": "http://x", "header": "A"}]},
        {"route": [{"name": "r", "upstream": "http://x", "header": "A", "value": "no secret"}]},
        {"budget": {"requests_per_run": -1}},
    ],
)
def test_invalid_shapes_are_config_errors(bad: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        GatewayRules.from_dict(bad)


def test_model_dump_nones_mean_defaults() -> None:
    rules = GatewayRules.from_dict(
        {
            "enabled": None,
            "port": None,
            "allow": [{"host": "docs.example.com", "ports": None, "methods": None}],
            "route": [
                {
                    "name": "r",
                    "upstream": "http://api.example.com",
                    "header": "X-Key",
                    "value": None,
                    "secret_env": "E",
                    "secret_file": None,
                    "methods": None,
                }
            ],
            "budget": {"requests_per_run": None},
        }
    )
    assert rules.enabled and rules.port == 3128
    assert rules.allow[0].ports == (80, 443) and rules.allow[0].methods == ("GET", "HEAD")
    assert rules.routes[0].value == "{secret}" and rules.budget.requests_per_run is None
