"""Settings come from ``IMPYARD_*`` variables, parsed by type; a bad one is named."""

from __future__ import annotations

from pathlib import Path

import pytest

from impyard.common.errors import ConfigError
from impyard.settings import load_settings


def test_variables_are_parsed_by_type_and_match_in_any_case(tmp_path: Path) -> None:
    settings = load_settings(
        environ={
            "IMPYARD_HOME": str(tmp_path / "root"),
            "IMPYARD_CONCURRENCY": "3",
            "impyard_strict_policy": "yes",
            "IMPYARD_SHUTDOWN_GRACE_SECONDS": "2.5",
            "IMPYARD_CHECKOUT": "copy",
            "IMPYARD_NOT_A_SETTING": "ignored",
            "HOME": "/root",
        }
    )
    assert settings.home == tmp_path / "root"
    assert settings.concurrency == 3
    assert settings.strict_policy is True
    assert settings.shutdown_grace_seconds == 2.5
    assert settings.checkout == "copy"


def test_defaults_hold_without_variables_and_home_is_made_absolute() -> None:
    settings = load_settings(environ={})
    assert settings.home == Path(".impyard").absolute()
    assert settings.checkout == "auto" and settings.strict_policy is False
    assert settings.concurrency >= 2


def test_an_explicit_home_wins_over_the_environment(tmp_path: Path) -> None:
    settings = load_settings(tmp_path / "flag", environ={"IMPYARD_HOME": "/elsewhere"})
    assert settings.home == tmp_path / "flag"


def test_every_bad_variable_is_named_in_one_error() -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(
            environ={
                "IMPYARD_CONCURRENCY": "many",
                "IMPYARD_CHECKOUT": "rsync",
                "IMPYARD_DOCKER_TIMEOUT_SECONDS": "0",
            }
        )
    message = str(caught.value)
    assert "IMPYARD_CONCURRENCY='many'" in message
    assert "IMPYARD_CHECKOUT='rsync'" in message
    assert "IMPYARD_DOCKER_TIMEOUT_SECONDS='0'" in message
