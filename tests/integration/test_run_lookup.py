"""Real runs found by a prefix of their id or ``last``, through the real CLI and engine."""

from __future__ import annotations

import json

import pytest

from tests.helpers.cli import Cli

pytestmark = pytest.mark.docker

SAY = 'echo "box of $IMPYARD_IMP in $IMPYARD_RUN_ID"'


def run_id_of(cli: Cli, imp: str) -> str:
    done = cli("run", imp, "--prompt", "say who you are", "--command", SAY, "--json")
    assert done.code == 0, done.stderr
    return str(json.loads(done.stdout)["run_id"])


def test_real_runs_resolve_by_prefix_and_last_and_an_ambiguous_prefix_is_one_line(
    cli: Cli,
) -> None:
    assert cli("init").code == 0
    for imp in ("yuko", "pia"):
        assert cli("imp", "create", imp).code == 0
    first = run_id_of(cli, "yuko")
    second = run_id_of(cli, "pia")

    assert cli("runs", "logs", "last").stdout == f"box of pia in {second}\n"
    shown = json.loads(cli("runs", "show", "last", "--json").stdout)
    assert (shown["run_id"], shown["imp"]) == (second, "pia")
    # The shortest prefix of the first run's id that the second's does not share.
    shared = next(i for i, (a, b) in enumerate(zip(first, second, strict=True)) if a != b)
    prefix = first[: shared + 1]
    assert cli("runs", "logs", prefix).stdout == f"box of yuko in {first}\n"
    assert json.loads(cli("runs", "show", first[4:], "--json").stdout)["run_id"] == first
    listed = json.loads(cli("runs", "list", "-n", "1", "--json").stdout)
    assert [r["run_id"] for r in listed] == [second]

    ambiguous = cli("runs", "show", "run-")
    assert ambiguous.code == 2
    [line] = ambiguous.stderr.splitlines()
    assert line.startswith("impyard: error: run prefix 'run-' is ambiguous: ")
    assert first in line and second in line
