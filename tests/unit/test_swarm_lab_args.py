"""The swarm lab script's argument errors: usage on stderr and exit 2, before it touches
anything (no root, no engine needed)."""

from __future__ import annotations

import pytest

from tests.helpers.swarm_lab import run_script


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        ((), ""),
        (("frob",), "unknown command 'frob'"),
        (("up",), "up needs the number of nodes N"),
        (("up", "--home", "/nonexistent/home"), "up needs the number of nodes N"),
        (("up", "2"), "up needs --home DIR"),
        (("up", "0", "--home", "/nonexistent/home"), "N must be a whole number"),
        (("up", "two", "--home", "/nonexistent/home"), "N must be a whole number"),
        (("up", "2", "--home", "/nonexistent/home", "--frob"), "unknown option '--frob'"),
        (("down", "now"), "down takes no arguments"),
    ],
)
def test_bad_arguments_print_usage_and_exit_2(args: tuple[str, ...], problem: str) -> None:
    result = run_script(*args, timeout=30)
    assert result.returncode == 2, result
    assert problem in result.stderr
    assert "usage: " in result.stderr and " up N --home DIR" in result.stderr
    assert result.stdout == ""
