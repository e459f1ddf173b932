from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from impyard.gateway.errors import GatewayError
from impyard.gateway.guard.rules import Endpoint, decide, route_header
from impyard.policy.models import GatewayPolicy, GatewayRoute

EXAMPLE: dict[str, Any] = {
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
def policy() -> GatewayPolicy:
    return GatewayPolicy.model_validate(EXAMPLE)


def test_route_endpoint_comes_from_the_upstream_url(policy: GatewayPolicy) -> None:
    assert Endpoint.of(policy.route[0]) == Endpoint("api.example.com", 443, True, "/v1")
    plain = policy.route[0].model_copy(update={"upstream": "http://API.example.com.:8080"})
    assert Endpoint.of(plain) == Endpoint("api.example.com", 8080, False, "")


def test_exact_host_port_and_method(policy: GatewayPolicy) -> None:
    ok = decide(policy, "GET", "docs.example.com", 80, "/a")
    assert ok.allowed and ok.rule == "gateway.allow[0] docs.example.com"
    assert decide(policy, "head", "DOCS.Example.COM.", 80, "/").allowed
    assert not decide(policy, "GET", "docs.example.com", 8080, "/").allowed
    assert not decide(policy, "GET", "evil.docs.example.com", 80, "/").allowed


def test_method_refusal_names_the_rule(policy: GatewayPolicy) -> None:
    post = decide(policy, "POST", "docs.example.com", 80, "/")
    assert not post.allowed and post.status == 403
    assert post.rule == "gateway.allow[0] docs.example.com"
    assert post.reason == (
        "POST to docs.example.com:80 is not allowed by gateway.allow[0] docs.example.com "
        "(methods: GET, HEAD)"
    )
    # A method no policy can grant is refused the same way, naming the nearest rule.
    assert decide(policy, "PROPFIND", "docs.example.com", 80, "/").rule == post.rule


def test_wildcard_is_subdomains_only(policy: GatewayPolicy) -> None:
    assert decide(policy, "GET", "a.example.org", 443, "/").allowed
    assert decide(policy, "GET", "a.b.example.org", 443, "/").allowed
    assert not decide(policy, "GET", "example.org", 443, "/").allowed
    assert not decide(policy, "GET", "badexample.org", 443, "/").allowed


def test_connect_checks_host_and_port_only(policy: GatewayPolicy) -> None:
    # docs.example.com allows GET/HEAD only, yet CONNECT is judged by endpoint.
    assert decide(policy, "CONNECT", "docs.example.com", 443, "").allowed
    assert not decide(policy, "CONNECT", "docs.example.com", 22, "").allowed
    assert not decide(policy, "CONNECT", "example.com", 443, "").allowed


def test_first_match_wins_and_later_rules_can_grant(policy: GatewayPolicy) -> None:
    get = decide(policy, "GET", "api.example.net", 80, "/")
    assert get.rule == "gateway.allow[2] api.example.net"
    post = decide(policy, "POST", "api.example.net", 80, "/")
    assert post.allowed and post.rule == "gateway.allow[3] api.example.net"


def test_verdicts_agree_with_the_policy_matcher(policy: GatewayPolicy) -> None:
    """Deploy checks grants with ``find_allow``; the running gateway must judge alike."""
    hosts = ["docs.example.com", "a.example.org", "example.org", "api.example.net", "x.com"]
    for host, port, method in itertools.product(hosts, [80, 443, 22], ["GET", "POST", "CONNECT"]):
        index = policy.find_allow(host, port, None if method == "CONNECT" else method)
        decision = decide(policy, method, host, port, "/")
        assert decision.allowed == (index is not None), (host, port, method)
        if index is not None:
            assert decision.rule == f"gateway.allow[{index}] {policy.allow[index].host}"


def test_default_deny(policy: GatewayPolicy) -> None:
    denied = decide(policy, "GET", "example.com", 80, "/")
    assert not denied.allowed and denied.status == 403 and denied.rule == "default-deny"
    assert denied.reason == "no gateway.allow rule matches example.com:80"
    default = GatewayPolicy()
    assert default.enabled and default.port == 3128
    assert not decide(default, "GET", "docs.example.com", 80, "/").allowed


def test_allow_rule_defaults_grant_read_only_on_80_and_443() -> None:
    policy = GatewayPolicy.model_validate({"allow": [{"host": "docs.example.com"}]})
    assert decide(policy, "GET", "docs.example.com", 80, "/").allowed
    assert decide(policy, "HEAD", "docs.example.com", 443, "/").allowed
    assert not decide(policy, "POST", "docs.example.com", 443, "/").allowed
    assert not decide(policy, "GET", "docs.example.com", 8080, "/").allowed


def test_routes(policy: GatewayPolicy) -> None:
    ok = decide(policy, "POST", "127.0.0.1", 3128, "/route/llm/chat/completions")
    assert ok.allowed and ok.route is not None and ok.route.name == "llm"
    assert ok.path == "/v1/chat/completions" and ok.rule == "gateway.route llm"
    get = decide(policy, "GET", "localhost", 3128, "/route/llm/x")
    assert not get.allowed and get.rule == "gateway.route llm" and "POST" in get.reason
    assert not decide(policy, "POST", "127.0.0.1", 3128, "/route/other/x").allowed
    assert not decide(policy, "GET", "127.0.0.1", 3128, "/").allowed
    assert not decide(policy, "CONNECT", "127.0.0.1", 3128, "").allowed
    assert not decide(policy, "POST", "127.0.0.1", 3128, "/route/llm/../admin").allowed
    assert not decide(policy, "POST", "127.0.0.1", 3128, "/route/llm/%2e%2e/admin").allowed
    # Another port on 127.0.0.1 is an ordinary upstream, judged by allow rules.
    assert not decide(policy, "POST", "127.0.0.1", 8080, "/route/llm/x").allowed


def test_route_secret_is_read_at_request_time(
    policy: GatewayPolicy, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    route = policy.route[0]
    with pytest.raises(GatewayError, match="IMPYARD_TEST_SECRET_LLM is not set"):
        route_header(route)
    monkeypatch.setenv("IMPYARD_TEST_SECRET_LLM", "s3cret")
    assert route_header(route) == ("Authorization", "Bearer s3cret")
    monkeypatch.setenv("IMPYARD_TEST_SECRET_LLM", "s3\r\nX-Evil: 1")
    with pytest.raises(GatewayError, match="line break"):
        route_header(route)
    secret_file = tmp_path / "secret"
    from_file = GatewayRoute.model_validate(
        {**EXAMPLE["route"][0], "secret_env": None, "secret_file": str(secret_file)}
    )
    with pytest.raises(GatewayError, match="is unreadable"):
        route_header(from_file)
    secret_file.write_text("\n")
    with pytest.raises(GatewayError, match="is empty"):
        route_header(from_file)
    secret_file.write_text("from-file\n")
    assert route_header(from_file) == ("Authorization", "Bearer from-file")


def test_a_route_built_without_validation_fails_closed() -> None:
    route = GatewayRoute.model_construct(
        name="r", upstream="http://api.example.com", header="X-Key", value="{secret}"
    )
    with pytest.raises(GatewayError, match="no secret source"):
        route_header(route)


@pytest.mark.parametrize(
    "bad",
    [
        {"port": 0},
        {"allow": [{"host": ""}]},
        {"allow": [{"host": "a.*.com"}]},
        {"allow": [{"host": "x.com", "ports": [70000]}]},
        {"allow": {"host": "x.com"}},
        {"route": [{"name": "r", "upstream": "ftp://x", "header": "A", "secret_env": "E"}]},
        {"route": [{"name": "r", "upstream": "http://x:99999", "header": "A", "secret_env": "E"}]},
        {"route": [{"name": "r", "upstream": "http://x", "header": "A"}]},
        {"route": [{"name": "r", "upstream": "http://x", "header": "A", "value": "no secret"}]},
        {"budget": {"requests_per_run": -1}},
    ],
)
def test_the_policy_refuses_what_the_gateway_cannot_serve(bad: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        GatewayPolicy.model_validate(bad)
