"""Policy models: types, ranges, gateway rule shapes, and the shipped defaults."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from impyard.knowledge.change import KnowledgeLimits
from impyard.policy import GatewayAllow, GatewayPolicy, GatewayRoute, Policy
from impyard.policy.overlay import leaf_keys

REPO = Path(__file__).resolve().parents[2]


def test_shipped_org_policy_is_valid_and_spells_out_the_model_defaults() -> None:
    raw = tomllib.loads((REPO / "policy" / "org.toml").read_text())
    assert Policy.model_validate(raw) == Policy()


def test_example_overlay_is_never_picked_up_as_a_policy_file() -> None:
    assert (REPO / "policy" / "imps" / "example.toml.sample").is_file()
    assert not list((REPO / "policy" / "imps").glob("*.toml"))


def test_knowledge_limits_come_from_the_policy() -> None:
    policy = Policy.model_validate({"knowledge": {"max_file_chars": 10, "max_repo_bytes": 99}})
    # A candidate never keeps more than the repository could hold.
    assert KnowledgeLimits.of(policy.knowledge) == KnowledgeLimits(
        max_file_chars=10, max_repo_bytes=99, candidate_max_bytes=99
    )
    roomy = Policy.model_validate({"knowledge": {"candidate_max_bytes": 5000}})
    assert KnowledgeLimits.of(roomy.knowledge).candidate_max_bytes == 5000


def test_every_key_has_exactly_one_overlay_rule() -> None:
    def flatten(value: dict[str, Any], prefix: str = "") -> set[str]:
        keys: set[str] = set()
        for key, item in value.items():
            if isinstance(item, dict) and key != "env":  # box.env is a value, not a table
                keys |= flatten(item, f"{prefix}{key}.")
            else:
                keys.add(f"{prefix}{key}")
        return keys

    assert {key for key, _ in leaf_keys()} == flatten(Policy().model_dump())


@pytest.mark.parametrize(
    ("table", "key"),
    [
        ({"knowledge": {"enabled": 1}}, "enabled"),  # strict: 1 is not a bool
        ({"knowledge": {"max_file_chars": "100"}}, "max_file_chars"),  # nor "100" an int
        ({"knowledge": {"max_file_chars": True}}, "max_file_chars"),
        ({"knowledge": {"max_repo_bytes": 0}}, "max_repo_bytes"),
        ({"knowledge": {"normal_mode": "reorganize"}}, "normal_mode"),
        ({"box": {"user": "0:0"}}, "user"),
        ({"box": {"user": "65532"}}, "user"),
        ({"box": {"memory_bytes": 1024}}, "memory_bytes"),  # below Docker's minimum
        ({"box": {"cpus": 0}}, "cpus"),
        ({"box": {"command": []}}, "command"),
        ({"box": {"network": "bridge"}}, "network"),
        ({"gateway": {"port": 0}}, "port"),
        ({"gateway": {"port": 65536}}, "port"),
        ({"gateway": {"budget": {"requests_per_run": -1}}}, "requests_per_run"),
        ({"knowledge": {"max_files": 3}}, "max_files"),
        ({"sandbox": {}}, "sandbox"),
    ],
)
def test_bad_values_are_rejected_naming_the_key(table: dict[str, Any], key: str) -> None:
    with pytest.raises(ValidationError) as info:
        Policy.model_validate(table)
    assert any(error["loc"][-1] == key for error in info.value.errors())


@pytest.mark.parametrize(
    ("host", "stored"),
    [
        ("docs.example.com", "docs.example.com"),
        ("Docs.Example.COM.", "docs.example.com"),
        ("*.example.com", "*.example.com"),
        ("127.0.0.1", "127.0.0.1"),
        ("[::1]", "::1"),
    ],
)
def test_allow_hosts_are_exact_or_subdomain_wildcards(host: str, stored: str) -> None:
    assert GatewayAllow(host=host).host == stored


@pytest.mark.parametrize(
    "host", ["*", "", "*.*.example.com", "ex ample.com", "-bad.com", "http://x.com", "*.10.0.0.1"]
)
def test_bad_allow_hosts_are_rejected(host: str) -> None:
    with pytest.raises(ValidationError):
        GatewayAllow(host=host)


@pytest.mark.parametrize(
    "rule",
    [
        {"host": "a.com", "ports": [0]},
        {"host": "a.com", "ports": [65536]},
        {"host": "a.com", "ports": []},
        {"host": "a.com", "ports": [443, 443]},
        {"host": "a.com", "methods": ["get"]},
        {"host": "a.com", "methods": ["CONNECT"]},
        {"host": "a.com", "methods": []},
        {"host": "a.com", "methods": ["GET", "GET"]},
    ],
)
def test_bad_ports_and_methods_are_rejected(rule: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        GatewayAllow.model_validate(rule)


ROUTE = {
    "name": "llm",
    "upstream": "https://api.example.com/v1",
    "header": "Authorization",
    "value": "Bearer {secret}",
    "secret_env": "IMPYARD_SECRET_LLM",
    "methods": ["POST"],
}


@pytest.mark.parametrize(
    "change",
    [
        {"secret_file": "/run/secrets/llm"},  # both secret sources
        {"secret_env": None},  # neither
        {"value": "Bearer token"},  # the secret is never used
        {"value": "Bearer {secret}\r\nX-Evil: 1"},
        {"upstream": "ftp://api.example.com"},
        {"upstream": "https://user:pw@api.example.com"},
        {"header": "Bad Header"},
        {"name": "Bad/Name"},
        {"secret_env": "NOT-AN-ENV"},
    ],
)
def test_bad_routes_are_rejected(change: dict[str, Any]) -> None:
    GatewayRoute.model_validate(ROUTE)  # the base route is valid
    with pytest.raises(ValidationError):
        GatewayRoute.model_validate({**ROUTE, **change})


def test_route_names_are_unique() -> None:
    with pytest.raises(ValidationError, match="route names"):
        GatewayPolicy.model_validate({"route": [ROUTE, ROUTE]})


def test_gateway_denies_by_default_and_rules_are_a_union() -> None:
    assert Policy().gateway.allow == []
    assert Policy().gateway.find_allow("example.com", 443, None) is None
    gateway = GatewayPolicy.model_validate(
        {
            "allow": [
                {"host": "a.example.com", "ports": [80], "methods": ["GET"]},
                {"host": "*.example.com", "ports": [80, 443], "methods": ["GET", "POST"]},
            ]
        }
    )
    assert gateway.find_allow("a.example.com", 80, "GET") == 0
    # Not refused by the first, narrower rule: removing that rule must never widen access.
    assert gateway.find_allow("a.example.com", 80, "POST") == 1
    assert gateway.find_allow("A.EXAMPLE.COM", 443, None) == 1  # CONNECT: host and port only
    assert gateway.find_allow("example.com", 443, None) is None  # the apex is not a subdomain
    assert gateway.find_allow("b.example.com", 80, "DELETE") is None
    assert gateway.find_allow("b.example.com", 8080, "GET") is None
