"""`impyard policy show`: the effective policy and where each value came from."""

from __future__ import annotations

import json

from tests.helpers.cli import Cli
from tests.helpers.policy import edit_org


def test_show_json_reports_the_source_of_each_value(cli: Cli) -> None:
    assert cli("init").code == 0
    # Drop a key from the org file: its value must then come from the model default.
    edit_org(cli.home, "max_repo_bytes = 1000000000\n", "")
    (cli.home / "policy" / "imps" / "yuko.toml").write_text(
        "[knowledge]\nmax_file_chars = 1000\n[gateway.budget]\nrequests_per_run = 7\n"
    )
    assert cli("deploy").code == 0

    result = cli("policy", "show", "yuko", "--json")

    assert result.code == 0, result.stderr
    shown = json.loads(result.stdout)
    values = shown["values"]
    assert values["knowledge.max_file_chars"] == {
        "value": 1000,
        "source": "overlay",
        "overlay_rule": "lower",
    }
    assert values["gateway.budget.requests_per_run"]["source"] == "overlay"
    assert values["gateway.budget.requests_per_run"]["value"] == 7
    assert values["gateway.budget.requests_per_imp_per_day"]["source"] == "org"
    assert values["knowledge.max_repo_bytes"] == {
        "value": 1_000_000_000,
        "source": "default",
        "overlay_rule": "lower",
    }
    assert values["knowledge.enabled"]["source"] == "org"
    assert values["gateway.allow"] == {"value": [], "source": "default", "overlay_rule": "subset"}
    assert shown["overlay_file"] == str(cli.home / "policy" / "imps" / "yuko.toml")
    assert shown["stale"] is None
    assert result.stderr == ""

    assert cli("policy", "show", "kiko").code == 2  # no such imp: said, not the org's shown
    assert cli("imp", "create", "kiko").code == 0
    other = json.loads(cli("policy", "show", "kiko", "--json").stdout)
    assert other["values"]["knowledge.max_file_chars"] == {
        "value": 200_000,
        "source": "org",
        "overlay_rule": "lower",
    }
    assert other["overlay_file"] is None


def test_show_warns_when_compiled_policy_differs_from_the_files(cli: Cli) -> None:
    assert cli("init").code == 0
    (cli.home / "policy" / "imps" / "yuko.toml").write_text("[knowledge]\nenabled = false\n")
    result = cli("policy", "show", "yuko")
    assert result.code == 0
    assert "knowledge.enabled" in result.stdout and "overlay" in result.stdout
    assert "warning" in result.stderr and "impyard deploy" in result.stderr


def test_show_of_invalid_policy_lists_violations(cli: Cli) -> None:
    assert cli("init").code == 0
    path = cli.home / "policy" / "imps" / "yuko.toml"
    path.write_text("[knowledge]\nmax_file_chars = 900000\n")
    result = cli("policy", "show", "yuko")
    assert result.code == 1
    assert f"{path}: knowledge.max_file_chars:" in result.stderr
    assert "Traceback" not in result.stderr


def test_policy_commands_need_an_initialized_home(cli: Cli) -> None:
    result = cli("deploy")
    assert result.code == 2
    assert "impyard init" in result.stderr
