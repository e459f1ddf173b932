"""The policy model's ``model_dump()`` is the gateway's input; both must judge alike."""

from __future__ import annotations

import itertools

from impyard.gateway.rules import GatewayRules
from impyard.policy.models import GatewayPolicy
from tests.unit.test_gateway_rules import ISSUE_EXAMPLE


def test_policy_dump_builds_rules_that_agree_with_the_policy() -> None:
    example = {
        **ISSUE_EXAMPLE,
        "route": [{**ISSUE_EXAMPLE["route"][0], "upstream": "https://api.example.com/v1"}],
    }
    policy = GatewayPolicy.model_validate(example)
    rules = GatewayRules.from_dict(policy.model_dump())
    assert rules.port == policy.port and len(rules.allow) == len(policy.allow)
    assert rules.budget.requests_per_imp_per_day == policy.budget.requests_per_imp_per_day
    hosts = ["docs.example.com", "a.example.org", "example.org", "api.example.net", "x.com"]
    for host, port, method in itertools.product(hosts, [80, 443, 22], ["GET", "POST", "CONNECT"]):
        index = policy.find_allow(host, port, None if method == "CONNECT" else method)
        decision = rules.decide(method, host, port, "/")
        assert decision.allowed == (index is not None), (host, port, method)
        if index is not None:
            assert decision.rule == f"gateway.allow[{index}] {policy.allow[index].host}"


def test_default_policy_gateway_is_enabled_and_denies() -> None:
    rules = GatewayRules.from_dict(GatewayPolicy().model_dump())
    assert rules.enabled and rules.allow == () and rules.budget.requests_per_run == 500
    assert not rules.decide("GET", "example.com", 80, "/").allowed
