"""``impyard service print|install``: the systemd unit for ``impyard serve``, and shell
completion."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from impyard.service.unit import (
    STOP_MARGIN_SECONDS,
    UnitOptions,
    grace_from_env_file,
    impyard_command,
    render_unit,
)
from tests.helpers.cli import Cli

#: Directives that give serve a mount namespace of its own, a device allow-list or no
#: setns: each would break loop-mounted run spaces or the gateway (see the unit's comments).
BREAKING = (
    "PrivateTmp",
    "ProtectSystem",
    "ProtectHome",
    "ReadWritePaths",
    "ReadOnlyPaths",
    "InaccessiblePaths",
    "PrivateDevices",
    "PrivateMounts",
    "ProtectKernelTunables",
    "ProtectKernelModules",
    "ProtectKernelLogs",
    "ProtectControlGroups",
    "ProtectProc",
    "ProtectClock",
    "DeviceAllow",
    "RestrictNamespaces",
    "PrivateNetwork",
    "MemoryDenyWriteExecute",
    "CapabilityBoundingSet",
    "TemporaryFileSystem",
    "BindPaths",
)


def directives(unit: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for line in unit.splitlines():
        if not line or line.startswith(("#", "[")):
            continue
        key, _, value = line.partition("=")
        found.setdefault(key, []).append(value)
    return found


@pytest.fixture
def env_file(tmp_path: Path) -> Path:
    return tmp_path / "etc" / "impyard.env"


def test_print_shows_the_unit_serve_needs(cli: Cli, env_file: Path) -> None:
    assert cli("init").code == 0
    result = cli("service", "print", "--env-file", str(env_file))
    assert result.code == 0, result.stderr
    unit = directives(result.stdout)
    (exec_start,) = unit["ExecStart"]
    assert exec_start == f"{impyard_command()[0]} --home {cli.home} serve"
    assert Path(impyard_command()[0]).is_absolute()
    assert unit["Restart"] == ["on-failure"]
    assert unit["KillMode"] == ["mixed"] and unit["KillSignal"] == ["SIGTERM"]
    # Longer than serve's grace period (30 s by default), with room to quarantine.
    assert unit["TimeoutStopSec"] == [str(30 + STOP_MARGIN_SECONDS)]
    assert unit["EnvironmentFile"] == [f"-{env_file}"]
    assert "docker.service" in unit["After"][0].split()
    assert "docker.service" in unit["Wants"][0].split()
    assert unit["NoNewPrivileges"] == ["yes"]
    assert "User" not in unit  # root: loop mounts and setns need it
    assert unit["WantedBy"] == ["multi-user.target"]
    assert not [key for key in unit if key in BREAKING]
    # Every directive left out is explained where an owner reads the unit.
    for name in ("PrivateTmp", "ProtectSystem", "ReadWritePaths", "RestrictNamespaces"):
        assert f"{name}=" in result.stdout
    assert "second SIGTERM" in result.stdout


def test_the_stop_timeout_follows_the_grace_period(cli: Cli, env_file: Path) -> None:
    assert cli("init").code == 0
    env = {"IMPYARD_SHUTDOWN_GRACE_SECONDS": "45"}
    result = cli("service", "print", "--env-file", str(env_file), env=env)
    assert directives(result.stdout)["TimeoutStopSec"] == [str(45 + STOP_MARGIN_SECONDS)]
    # The env file the service will read wins over this shell's environment.
    env_file.parent.mkdir(parents=True)
    env_file.write_text("IMPYARD_SECRET_LLM=sk-x\nIMPYARD_SHUTDOWN_GRACE_SECONDS='300.5'\n")
    result = cli("service", "print", "--env-file", str(env_file), env=env)
    assert directives(result.stdout)["TimeoutStopSec"] == [str(301 + STOP_MARGIN_SECONDS)]
    assert "sk-x" not in result.stdout  # the unit names the file, never its secrets


def test_grace_from_env_file_ignores_what_it_cannot_read(tmp_path: Path) -> None:
    path = tmp_path / "env"
    assert grace_from_env_file(path) is None
    path.write_text("# comment\nIMPYARD_SHUTDOWN_GRACE_SECONDS=soon\nOTHER=1\n")
    assert grace_from_env_file(path) is None


def test_options_on_the_command_line(cli: Cli, tmp_path: Path, env_file: Path) -> None:
    home = tmp_path / "data root %1"
    result = cli("service", "print", "--home", str(home), "--user", "imps", "--env-file", "x.env")
    assert result.code == 0, result.stderr
    unit = directives(result.stdout)
    assert unit["ExecStart"] == [f'{impyard_command()[0]} --home "{tmp_path}/data root %%1" serve']
    assert unit["User"] == ["imps"]
    assert unit["EnvironmentFile"] == [f"-{Path('x.env').absolute()}"]
    assert "no data root at" in result.stderr  # not initialized yet: said, not refused
    assert "cannot loop-mount" in result.stderr  # a non-root user is warned about


@pytest.mark.parametrize(
    ("option", "value"),
    [("--user", "bad name"), ("--user", "a\nb"), ("--env-file", "/etc/with space.env")],
)
def test_values_a_unit_cannot_hold_are_refused(cli: Cli, option: str, value: str) -> None:
    result = cli("service", "print", option, value)
    assert result.code == 2
    assert result.stdout == ""
    assert "impyard: error:" in result.stderr


def test_install_writes_then_refuses_a_different_unit_unless_forced(
    cli: Cli, tmp_path: Path, env_file: Path
) -> None:
    assert cli("init").code == 0
    path = tmp_path / "units" / "impyard.service"
    path.parent.mkdir()
    args = ("service", "install", "--path", str(path), "--env-file", str(env_file))
    first = cli(*args)
    assert first.code == 0, first.stderr
    assert f"written {path}" in first.stdout
    assert "systemctl daemon-reload && systemctl enable --now impyard" in first.stdout
    printed = cli("service", "print", "--env-file", str(env_file)).stdout
    assert path.read_text() == printed
    again = cli(*args)
    assert again.code == 0 and "already holds this unit" in again.stdout
    other = cli(*args, env={"IMPYARD_SHUTDOWN_GRACE_SECONDS": "600"})
    assert other.code == 1
    assert "--force" in other.stderr and "Traceback" not in other.stderr
    assert path.read_text() == printed  # untouched
    forced = cli(*args, "--force", env={"IMPYARD_SHUTDOWN_GRACE_SECONDS": "600"})
    assert forced.code == 0 and f"replaced {path}" in forced.stdout
    assert f"TimeoutStopSec={600 + STOP_MARGIN_SECONDS}" in path.read_text()


def test_install_names_the_unit_it_wrote_and_explains_a_failed_write(
    cli: Cli, tmp_path: Path
) -> None:
    assert cli("init").code == 0
    path = tmp_path / "impyard-test.service"
    result = cli("service", "install", "--path", str(path))
    assert result.code == 0
    assert "systemctl enable --now impyard-test" in result.stdout
    missing = tmp_path / "no" / "such" / "dir" / "impyard.service"
    failed = cli("service", "install", "--path", str(missing))
    assert failed.code == 1
    assert f"cannot write {missing}" in failed.stderr


def test_the_unit_falls_back_to_the_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", ["/nowhere/__main__.py"])
    monkeypatch.setattr(sys, "executable", "/nowhere/bin/python3")
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert impyard_command() == ["/nowhere/bin/python3", "-m", "impyard"]


def test_systemd_analyze_verifies_the_written_unit(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed here: the unit is not verified")
    home = tmp_path / "home with space"
    unit = tmp_path / "impyard.service"
    unit.write_text(
        render_unit(
            UnitOptions(
                command=impyard_command(),
                home=home,
                env_file=tmp_path / "impyard.env",
                user="root",
                grace_seconds=30,
            )
        )
    )
    proc = subprocess.run(
        [analyze, "verify", str(unit)], capture_output=True, text=True, timeout=60
    )
    # verify exits 0 even for unknown keys or bad values: its stderr must not name our unit.
    complaints = [line for line in proc.stderr.splitlines() if unit.name in line]
    assert proc.returncode == 0, proc.stderr
    assert complaints == []


def test_shell_completion_is_offered(cli: Cli) -> None:
    result = cli("--help")
    assert "--install-completion" in result.stdout
    assert "--show-completion" in result.stdout
