from __future__ import annotations

import tomllib

from impyard import __version__
from tests.conftest import Cli


def test_version_prints_package_version(cli: Cli) -> None:
    result = cli("--version")
    assert result.code == 0
    assert result.stdout.strip() == f"impyard {__version__}"


def test_init_creates_data_root_with_default_policy_and_is_idempotent(cli: Cli) -> None:
    first = cli("init")
    assert first.code == 0, first.stderr
    assert "created" in first.stdout
    org = cli.home / "policy" / "org.toml"
    policy = tomllib.loads(org.read_text())
    assert policy["knowledge"]["normal_mode"] == "append"
    org.write_text(org.read_text() + "\n# owner edit\n")
    second = cli("init")
    assert second.code == 0
    assert "already initialized" in second.stdout
    assert org.read_text().endswith("# owner edit\n"), "init must not overwrite owner policy"


def test_unknown_command_is_a_usage_error_without_traceback(cli: Cli) -> None:
    result = cli("no-such-command")
    assert result.code == 2
    assert "Traceback" not in result.stderr
    assert "no-such-command" in result.stderr
