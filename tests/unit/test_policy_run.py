"""What a run gets: the compiled policy, or a loud fallback when it is stale."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from impyard.common.errors import ConfigError, UsageError
from impyard.dataroot import init_home
from impyard.home import Home
from impyard.policy import PolicyError, deploy, policy_for_run


@pytest.fixture
def home(tmp_path: Path) -> Home:
    home = Home(tmp_path / "home")
    init_home(home)
    home.imp_policy("yuko").write_text("[knowledge]\nmax_file_chars = 5000\n")
    deploy(home)
    return home


def test_fresh_compiled_policy_is_used_without_warnings(home: Home) -> None:
    policy, warnings = policy_for_run(home, "yuko", strict=True)
    assert policy.knowledge.max_file_chars == 5000
    assert warnings == []


def test_compiled_policy_is_what_runs_use_not_the_file_being_edited(home: Home) -> None:
    # compiled.json, not org.toml, is what runs read: prove it by editing compiled.json.
    home.compiled_policy.write_text(
        home.compiled_policy.read_text().replace('"max_file_chars": 5000', '"max_file_chars": 77')
    )
    policy, warnings = policy_for_run(home, "yuko", strict=True)
    assert (policy.knowledge.max_file_chars, warnings) == (77, [])


def test_stale_overlay_warns_and_uses_the_sources_by_default(home: Home) -> None:
    home.imp_policy("yuko").write_text("[knowledge]\nmax_file_chars = 4000\n")
    policy, warnings = policy_for_run(home, "yuko", strict=False)
    assert policy.knowledge.max_file_chars == 4000
    assert len(warnings) == 1
    assert "stale" in warnings[0] and "imps/yuko.toml changed" in warnings[0]
    assert "impyard deploy" in warnings[0]


def test_stale_overlay_is_refused_under_strict(home: Home) -> None:
    home.imp_policy("yuko").write_text("[knowledge]\nmax_file_chars = 4000\n")
    with pytest.raises(ConfigError, match=r"stale.*run `impyard deploy`"):
        policy_for_run(home, "yuko", strict=True)


def test_stale_org_policy_affects_imps_without_overlay(home: Home) -> None:
    text = home.org_policy.read_text().replace("pids_limit = 256", "pids_limit = 100")
    home.org_policy.write_text(text)
    with pytest.raises(ConfigError, match=r"org\.toml changed"):
        policy_for_run(home, "kiko", strict=True)
    policy, warnings = policy_for_run(home, "kiko", strict=False)
    assert policy.box.pids_limit == 100
    assert warnings


def test_added_and_removed_overlays_make_the_policy_stale(home: Home) -> None:
    home.imp_policy("kiko").write_text("[knowledge]\nenabled = false\n")
    with pytest.raises(ConfigError, match=r"imps/kiko\.toml was added"):
        policy_for_run(home, "kiko", strict=True)
    home.imp_policy("yuko").unlink()
    policy, warnings = policy_for_run(home, "yuko", strict=False)
    assert policy.knowledge.max_file_chars == 200_000  # back to the org's
    assert "imps/yuko.toml was removed" in warnings[0]


def test_missing_compiled_policy_is_stale(home: Home) -> None:
    home.compiled_policy.unlink()
    with pytest.raises(ConfigError, match="does not exist"):
        policy_for_run(home, "yuko", strict=True)
    policy, warnings = policy_for_run(home, "yuko", strict=False)
    assert policy.knowledge.max_file_chars == 5000
    assert "does not exist" in warnings[0]


def test_corrupt_compiled_policy_is_stale(home: Home) -> None:
    home.compiled_policy.write_text("{not json")
    with pytest.raises(ConfigError, match="unreadable"):
        policy_for_run(home, "yuko", strict=True)


def test_touching_a_file_without_changing_it_is_not_stale(home: Home) -> None:
    later = home.imp_policy("yuko").stat().st_mtime + 100
    os.utime(home.imp_policy("yuko"), (later, later))
    os.utime(home.org_policy, (later, later))
    assert policy_for_run(home, "yuko", strict=True)[1] == []


def test_stale_and_invalid_sources_refuse_the_run_even_when_not_strict(home: Home) -> None:
    home.imp_policy("yuko").write_text("[knowledge]\nmax_file_chars = 900000\n")
    with pytest.raises(PolicyError, match="refusing to run imp 'yuko'") as info:
        policy_for_run(home, "yuko", strict=False)
    assert [v.key for v in info.value.violations] == ["knowledge.max_file_chars"]


def test_another_imps_broken_overlay_does_not_stop_this_imp(home: Home) -> None:
    home.imp_policy("kiko").write_text("[knowledge]\nmax_file_chars = 900000\n")
    policy, warnings = policy_for_run(home, "yuko", strict=True)
    assert (policy.knowledge.max_file_chars, warnings) == (5000, [])


def test_imp_names_are_checked(home: Home) -> None:
    with pytest.raises(UsageError):
        policy_for_run(home, "../org", strict=False)
