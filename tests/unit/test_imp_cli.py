"""`impyard imp create|list` and `impyard knowledge` through the real CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from impyard.box.images.agents import AGENTS
from tests.helpers.cli import Cli
from tests.helpers.fake_engine import engine_with_images
from tests.helpers.git import git


@pytest.fixture
def home_cli(cli: Cli) -> Cli:
    assert cli("init").code == 0
    return cli


def test_create_list_and_locate_an_imp(home_cli: Cli, tmp_path: Path) -> None:
    with engine_with_images() as engine:
        created = home_cli(
            "imp", "create", "yuko", "--image", "img:1", "--command", "echo hi", env=engine
        )
    assert created.code == 0, created.stderr
    listed = home_cli("imp", "list", "--json")
    assert listed.code == 0
    rows = json.loads(listed.stdout)
    assert [r["imp"] for r in rows] == ["yuko"]
    assert rows[0]["image"] == "img:1" and rows[0]["command"] == "echo hi"

    located = home_cli("knowledge", "yuko")
    assert located.code == 0 and located.stderr == ""
    assert located.stdout.count("\n") == 1
    path = located.stdout.strip()
    assert Path(path) == (home_cli.home / "knowledge/yuko/repo.git").resolve()

    log = git("-C", path, "log", "--oneline").stdout.splitlines()
    assert len(log) == 1 and "Create knowledge repository for yuko" in log[0]
    clone = tmp_path / "k"
    git("clone", "-q", path, clone)
    assert sorted(p.name for p in clone.iterdir() if p.name != ".git") == [
        "README.md",
        "organization",
        "records",
    ]


def test_plain_list_shows_each_imp(home_cli: Cli) -> None:
    assert home_cli("imp", "list").stdout.startswith("no imps")
    home_cli("imp", "create", "abe")
    home_cli("imp", "create", "yuko")
    lines = home_cli("imp", "list").stdout.splitlines()
    assert lines[0].split() == ["imp", "agent", "image", "command", "repository"]
    assert [line.split()[0] for line in lines[1:]] == ["abe", "yuko"]


@pytest.mark.parametrize("name", ["Yuko", "../etc", "a_b", "-rf"])
def test_invalid_names_are_refused_without_traceback(home_cli: Cli, name: str) -> None:
    result = home_cli("imp", "create", "--", name)
    assert result.code != 0
    assert "Traceback" not in result.stderr
    assert "invalid imp name" in result.stderr
    assert json.loads(home_cli("imp", "list", "--json").stdout) == []


def test_existing_imp_is_refused(home_cli: Cli) -> None:
    assert home_cli("imp", "create", "yuko").code == 0
    again = home_cli("imp", "create", "yuko")
    assert again.code != 0 and "already exists" in again.stderr
    assert "Traceback" not in again.stderr


def test_unknown_imp_is_a_clear_error(home_cli: Cli) -> None:
    result = home_cli("knowledge", "bob")
    assert result.code != 0
    assert result.stdout == ""
    assert "no imp named 'bob'" in result.stderr and "Traceback" not in result.stderr


def test_commands_need_an_initialized_home(cli: Cli) -> None:
    result = cli("imp", "create", "yuko")
    assert result.code != 0 and "impyard init" in result.stderr


def test_create_an_imp_with_the_pi_agent(home_cli: Cli) -> None:
    created = home_cli("imp", "create", "pia", "--agent", "pi")
    assert created.code == 0, created.stderr
    assert "IMPYARD_MODEL" in created.stdout and "[box.env]" in created.stdout
    [row] = json.loads(home_cli("imp", "list", "--json").stdout)
    assert row == {
        "imp": "pia",
        "repo": str(home_cli.home / "knowledge" / "pia" / "repo.git"),
        "image": "impyard-pi:latest",
        "command": "exec /opt/impyard/bin/pi-imp",
        "agent": "pi",
    }
    [_, row] = home_cli("imp", "list").stdout.splitlines()
    assert row.split()[:3] == ["pia", "pi", "impyard-pi:latest"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--agent", "claude"), f"unknown agent 'claude' (known: {', '.join(sorted(AGENTS))})"),
        (("--agent", "pi", "--command", "true"), "--agent sets the command"),
    ],
)
def test_bad_agent_options_are_refused(home_cli: Cli, args: tuple[str, ...], message: str) -> None:
    result = home_cli("imp", "create", "pia", *args)
    assert result.code == 2
    assert message in result.stderr and "Traceback" not in result.stderr
    assert json.loads(home_cli("imp", "list", "--json").stdout) == []
