"""The policy of receipts, the archive and uploads: names receipts redact (an overlay may
only add to them), the archive's switch and limits, the upload budget and an allow rule's
per-request cap, each under its overlay rule."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from impyard.dataroot import init_home
from impyard.home import Home
from impyard.policy import GatewayAllow, GatewayPolicy, PolicyError, deploy
from impyard.policy.models import Policy
from impyard.policy.overlay import leaf_keys
from impyard.policy.show import effective_policy_with_sources
from tests.helpers.policy import edit_org


@pytest.fixture
def home(tmp_path: Path) -> Home:
    home = Home(tmp_path / "home")
    init_home(home)
    return home


def overlay(home: Home, text: str, imp: str = "yuko") -> Path:
    path = home.imp_policy(imp)
    path.write_text(text)
    return path


def violations(home: Home) -> list[tuple[str, str]]:
    with pytest.raises(PolicyError) as info:
        deploy(home)
    return [(v.key, v.rule) for v in info.value.violations]


def test_the_new_keys_and_their_overlay_rules() -> None:
    rules = dict((key, marker.rule) for key, marker in leaf_keys())
    assert rules["gateway.secret_query_params"] == "superset"
    assert rules["gateway.budget.request_bytes_per_run"] == "lower"
    assert rules["gateway.archive.enabled"] == "disable"
    for limit in ("max_bytes_per_run", "max_object_bytes", "max_total_bytes"):
        assert rules[f"gateway.archive.{limit}"] == "lower"
    assert rules["gateway.archive.retention_days"] == "fixed"
    defaults = Policy().gateway
    assert defaults.archive.enabled is False
    assert defaults.budget.request_bytes_per_run == 10 * 1024 * 1024
    assert {"access_token", "token", "key", "api_key", "sig", "signature"} <= set(
        defaults.secret_query_params
    )


def test_an_overlay_may_add_secret_names_but_never_drop_one(home: Home) -> None:
    org_names = Policy().gateway.secret_query_params
    overlay(home, f"[gateway]\nsecret_query_params = {[*org_names, 'Session']!r}\n")
    report = deploy(home)
    assert report.policy_for("yuko").gateway.secret_query_params == [*org_names, "session"]
    shown = effective_policy_with_sources(home, "yuko").values["gateway.secret_query_params"]
    assert shown.source == "overlay" and shown.overlay_rule.rule == "superset"

    overlay(home, '[gateway]\nsecret_query_params = ["session", "key"]\n')
    with pytest.raises(PolicyError) as info:
        deploy(home)
    [violation] = info.value.violations
    assert violation.key == "gateway.secret_query_params"
    assert violation.rule == "removes-requirement"
    dropped = [name for name in Policy().gateway.secret_query_params if name != "key"]
    assert violation.message.endswith(f"never drop the org's: {', '.join(dropped)}")


@pytest.mark.parametrize(
    "names", [["a b"], ["x=y"], ["a&b"], [""], ["token", "TOKEN"], ["t" * 101]]
)
def test_bad_secret_names_are_refused(names: list[str]) -> None:
    with pytest.raises(ValidationError):
        GatewayPolicy(secret_query_params=names)


def test_secret_names_are_stored_lowercase() -> None:
    assert GatewayPolicy(secret_query_params=["X-Sig"]).secret_query_params == ["x-sig"]


def test_an_overlay_may_only_tighten_the_archive(home: Home) -> None:
    overlay(home, "[gateway.archive]\nenabled = true\n")
    assert violations(home) == [("gateway.archive.enabled", "enables-feature")]

    edit_org(home.root, "[gateway.archive]\nenabled = false", "[gateway.archive]\nenabled = true")
    overlay(
        home,
        "[gateway.archive]\nmax_object_bytes = 1000\nmax_bytes_per_run = 2000\n"
        "max_total_bytes = 3000\n",
    )
    archive = deploy(home).policy_for("yuko").gateway.archive
    assert archive.enabled and archive.max_object_bytes == 1000
    overlay(home, "[gateway.archive]\nenabled = false\n")
    assert not deploy(home).policy_for("yuko").gateway.archive.enabled

    overlay(
        home,
        "[gateway.archive]\nmax_object_bytes = 99999999999\nmax_total_bytes = 99999999999\n"
        "retention_days = 30\n",
    )
    assert violations(home) == [
        ("gateway.archive.max_object_bytes", "enlarges-limit"),
        ("gateway.archive.max_total_bytes", "enlarges-limit"),
        ("gateway.archive.retention_days", "org-only"),
    ]


def test_an_overlay_may_only_lower_the_upload_budget(home: Home) -> None:
    overlay(home, "[gateway.budget]\nrequest_bytes_per_run = 1000\n")
    assert deploy(home).policy_for("yuko").gateway.budget.request_bytes_per_run == 1000
    overlay(home, "[gateway.budget]\nrequest_bytes_per_run = 99999999999\n")
    assert violations(home) == [("gateway.budget.request_bytes_per_run", "enlarges-limit")]


CAPPED_ORG = '[[gateway.allow]]\nhost = "*.example.com"\nmethods = ["POST"]\nrequest_bytes = 1000\n'


@pytest.mark.parametrize(
    ("kept", "ok"),
    [
        ("request_bytes = 500\n", True),
        ("request_bytes = 1000\n", True),
        ("request_bytes = 1001\n", False),
        ("", False),  # no cap: more than the org granted
    ],
)
def test_a_kept_allow_rule_keeps_within_the_org_rules_cap(home: Home, kept: str, ok: bool) -> None:
    edit_org(home.root, "[gateway.budget]", CAPPED_ORG + "\n[gateway.budget]")
    path = overlay(
        home, f'[[gateway.allow]]\nhost = "docs.example.com"\nmethods = ["POST"]\n{kept}'
    )
    if ok:
        assert deploy(home).policy_for("yuko").gateway.allow[0].host == "docs.example.com"
        return
    with pytest.raises(PolicyError) as info:
        deploy(home)
    [violation] = info.value.violations
    assert (violation.key, violation.rule) == ("gateway.allow[0]", "not-granted")
    assert str(path) == violation.file
    assert ("request_bytes 1001" if kept else "without a request_bytes cap") in violation.message


def test_request_bytes_caps_are_positive_and_an_uncapped_org_rule_covers_a_capped_one() -> None:
    with pytest.raises(ValidationError):
        GatewayAllow(host="example.com", request_bytes=0)
    wide = GatewayAllow(host="*.example.com")
    assert GatewayAllow(host="a.example.com", request_bytes=10).within(wide)
    assert not wide.within(GatewayAllow(host="*.example.com", request_bytes=10))
