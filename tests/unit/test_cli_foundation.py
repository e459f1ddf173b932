from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from impyard import __version__
from tests.helpers.cli import Cli


def test_version_prints_package_version(both_cli: Cli) -> None:
    result = both_cli("--version")
    assert result.code == 0
    assert result.stdout.strip() == f"impyard {__version__}"


def test_init_creates_data_root_with_default_policy_and_is_idempotent(both_cli: Cli) -> None:
    first = both_cli("init")
    assert first.code == 0, first.stderr
    assert "created" in first.stdout
    org = both_cli.home / "policy" / "org.toml"
    policy = tomllib.loads(org.read_text())
    assert policy["knowledge"]["normal_mode"] == "append"
    org.write_text(org.read_text() + "\n# owner edit\n")
    second = both_cli("init")
    assert second.code == 0
    assert "already initialized" in second.stdout
    assert org.read_text().endswith("# owner edit\n"), "init must not overwrite owner policy"


def test_unknown_command_is_a_usage_error_without_traceback(both_cli: Cli) -> None:
    result = both_cli("no-such-command")
    assert result.code == 2
    assert "Traceback" not in result.stderr
    assert "no-such-command" in result.stderr


def test_an_unexpected_fault_is_logged_in_the_home_given_by_option(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Exit 70 names the log in the --home data root, not the environment's default."""
    from impyard import dataroot
    from impyard.cli.main import main

    def broken(home: object) -> bool:
        raise RuntimeError("simulated fault")

    home = tmp_path / "chosen"
    home.mkdir()
    monkeypatch.chdir(tmp_path)  # the default ./.impyard does not exist here
    monkeypatch.delenv("IMPYARD_HOME", raising=False)
    monkeypatch.setattr(dataroot, "init_home", broken)
    with pytest.raises(SystemExit) as exited:
        main(["--home", str(home), "init"])
    assert exited.value.code == 70
    log = home / "impyard-error.log"
    assert f"details in {log}" in capsys.readouterr().err
    assert "RuntimeError: simulated fault" in log.read_text()


@pytest.mark.parametrize("kind", ["file", "under-a-file", "read-only"])
def test_init_on_an_unusable_home_is_one_line(cli: Cli, kind: str) -> None:
    blocker = cli.home.parent / "blocker"
    blocker.write_text("not a directory\n")
    if kind == "file":
        home = blocker
    elif kind == "under-a-file":
        home = blocker / "home"
    else:
        home = Path("/proc/impyard-home")
    result = Cli(home)("init")
    assert result.code == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("impyard: error: "), result.stderr
    assert str(home) in lines[0] and "Traceback" not in result.stderr


def test_a_command_is_parsed_in_a_tree_holding_only_that_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """typer builds every command it holds before parsing: an invocation gets the part it
    names; help, completion and unknown words get the whole tree."""
    from impyard.cli.main import app, app_for

    monkeypatch.delenv("_IMPYARD_COMPLETE", raising=False)
    only_run = app_for(["--home", "/x", "run", "bench", "--prompt", "p"])
    assert [c.name for c in only_run.registered_commands] == ["run"]
    assert only_run.registered_groups == []
    only_runs = app_for(["--home=/x", "runs", "list"])
    assert only_runs.registered_commands == []
    assert [g.name for g in only_runs.registered_groups] == ["runs"]
    assert app_for(["--help"]) is app
    assert app_for(["--home", "/x"]) is app
    assert app_for(["no-such-command"]) is app
    monkeypatch.setenv("_IMPYARD_COMPLETE", "bash_complete")
    assert app_for(["run"]) is app


def test_top_level_help_lists_every_command_and_a_command_help_names_its_own(
    both_cli: Cli,
) -> None:
    top = both_cli("--help")
    assert top.code == 0, top.stderr
    for name in ("init", "run", "runs", "serve", "status", "memory", "backup", "quarantine"):
        assert f" {name} " in top.stdout, name
    own = both_cli("run", "--help")
    assert own.code == 0, own.stderr
    assert "impyard run" in own.stdout and "--prompt" in own.stdout
