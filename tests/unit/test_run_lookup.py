"""Finding runs through the real CLI: a unique prefix of a run id (``run-`` optional) or
``last`` names a run wherever one is taken, an ambiguous prefix is a one-line error naming
the matches, ``runs list`` is newest first and bounded, and shell completion offers imp
names and recent run ids."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from impyard.common.errors import AmbiguousError, NotFoundError
from impyard.home import Home
from impyard.runs.records.lookup import resolve_run
from tests.helpers.cli import Cli
from tests.helpers.runs import write_run

RUN_ID = re.compile(r"run-\d{8}T\d{6}Z-[0-9a-f]{10}")

A = "run-20260710T080000Z-aaaaaaaaaa"
B = "run-20260711T090000Z-bbbbbbbbbb"
# Made in the same second: D sorts first by id, but its manifest was created later.
C = "run-20260711T120000Z-cccccccccc"
D = "run-20260711T120000Z-0ddddddddd"


@pytest.fixture
def home(cli: Cli) -> Home:
    """A data root holding runs A (yuko), B (pia), C (yuko) and D (pia), D the newest."""
    assert cli("init").code == 0
    home = Home(cli.home)
    write_run(home, A, "yuko", created_at="2026-07-10T08:00:00.100000Z")
    write_run(home, B, "pia", created_at="2026-07-11T09:00:00.100000Z")
    write_run(home, C, "yuko", created_at="2026-07-11T12:00:00.200000Z")
    write_run(home, D, "pia", created_at="2026-07-11T12:00:00.700000Z")
    return home


def shown_id(cli: Cli, text: str) -> str:
    result = cli("runs", "show", text, "--json")
    assert result.code == 0, result.stderr
    return str(json.loads(result.stdout)["run_id"])


def many_runs(home: Home, count: int) -> list[str]:
    """``count`` runs a minute apart, imps alternating yuko/pia; their ids, newest first."""
    ids = []
    for i in range(count):
        run_id = f"run-20260712T{10 + i // 60:02d}{i % 60:02d}00Z-{i:010x}"
        write_run(home, run_id, "yuko" if i % 2 == 0 else "pia")
        ids.append(run_id)
    return ids[::-1]


def one_error_line(stderr: str) -> str:
    assert "Traceback" not in stderr
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    return lines[0]


def test_a_unique_prefix_names_its_run_with_or_without_run(cli: Cli, home: Home) -> None:
    assert shown_id(cli, D) == D
    assert shown_id(cli, "run-20260710") == A
    assert shown_id(cli, "20260711T09") == B
    assert shown_id(cli, "run-20260711T120000Z-c") == C
    assert shown_id(cli, "20260711T120000Z-0") == D
    assert f"run               {B}" in cli("runs", "show", "run-20260711T0").stdout


def test_last_is_the_newest_run_by_creation_and_an_imp_scopes_it(cli: Cli, home: Home) -> None:
    assert shown_id(cli, "last") == D
    assert resolve_run(home, "last", imp="yuko") == C
    assert resolve_run(home, "last", imp="pia") == D
    assert resolve_run(home, "run-20260711", imp="yuko") == C
    with pytest.raises(NotFoundError, match="imp 'nobody' has no runs"):
        resolve_run(home, "last", imp="nobody")
    with pytest.raises(NotFoundError, match="not a run of imp 'yuko'"):
        resolve_run(home, B, imp="yuko")
    with pytest.raises(AmbiguousError) as raised:
        resolve_run(home, "run-20260711", imp="pia")
    assert raised.value.matches == [D, B]


def test_last_in_a_data_root_without_runs_is_not_found(cli: Cli) -> None:
    assert cli("init").code == 0
    result = cli("runs", "show", "last")
    assert result.code == 2
    assert one_error_line(result.stderr).startswith("impyard: error: no runs yet in ")


@pytest.mark.parametrize(
    "command",
    [
        ("runs", "show"),
        ("runs", "logs"),
        ("runs", "receipts"),
        ("candidates", "show"),
        ("quarantine", "diff"),
        ("candidates", "drop"),
    ],
)
def test_an_ambiguous_prefix_is_one_line_naming_the_newest_matches(
    cli: Cli, home: Home, command: tuple[str, ...]
) -> None:
    newest = many_runs(home, 8)
    result = cli(*command, "run-202607")
    assert result.code == 2
    line = one_error_line(result.stderr)
    listed = ", ".join(newest[:5])
    assert line == (f"impyard: error: run prefix 'run-202607' is ambiguous: {listed} (and 7 more)")


def test_a_prefix_matching_nothing_is_not_found(cli: Cli, home: Home) -> None:
    for text in ("run-2025", "zzz", "run-20260711T120000Z-cccccccccd", "lastly"):
        result = cli("runs", "show", text)
        assert result.code == 2
        assert one_error_line(result.stderr) == f"impyard: error: no run matches {text!r}"


@pytest.mark.parametrize(
    "text",
    [
        "../outside",
        "..",
        "/",
        f"{A}/../../outside",
        "run-2026\n",
        "run-\x1b[2J",
        "",
        "run-2026" + "0" * 200,
    ],
)
def test_text_that_is_no_run_id_prefix_never_reaches_a_path(
    cli: Cli, home: Home, text: str
) -> None:
    outside = home.root / "outside"
    outside.mkdir()
    (outside / "manifest.json").write_bytes(home.manifest(A).read_bytes())
    result = cli("runs", "show", text)
    assert result.code == 2
    line = one_error_line(result.stderr)
    assert line.startswith("impyard: error: no run matches ")
    assert "\x1b" not in line and len(line) < 100


def table_ids(stdout: str) -> list[str]:
    return RUN_ID.findall(stdout)


def test_runs_list_is_newest_first_and_bounded_by_n_or_all(cli: Cli, home: Home) -> None:
    newest = [*many_runs(home, 25), D, C, B, A]

    shown = cli("runs", "list")
    assert shown.code == 0
    assert table_ids(shown.stdout) == newest[:20]
    assert shown.stderr == "… 9 older runs not shown (use -n or --all)\n"

    three = cli("runs", "list", "-n", "3")
    assert table_ids(three.stdout) == newest[:3]
    assert "26 older runs" in three.stderr

    everything = cli("runs", "list", "--all")
    assert table_ids(everything.stdout) == newest and everything.stderr == ""

    as_json = cli("runs", "list", "--json")
    assert [r["run_id"] for r in json.loads(as_json.stdout)] == newest[:20]
    all_json = cli("runs", "list", "--all", "--json")
    assert [r["run_id"] for r in json.loads(all_json.stdout)] == newest

    yuko = [
        run_id
        for run_id in newest
        if json.loads(home.manifest(run_id).read_text())["imp"] == "yuko"
    ]
    two = cli("runs", "list", "--imp", "yuko", "-n", "2")
    assert table_ids(two.stdout) == yuko[:2]
    assert two.stderr == "… older runs of yuko not shown (use -n or --all)\n"
    every_yuko = cli("runs", "list", "--imp", "yuko", "--all", "--json")
    assert [r["run_id"] for r in json.loads(every_yuko.stdout)] == yuko

    assert cli("runs", "list", "-n", "0").code == 2


# -- shell completion --------------------------------------------------------------------


def complete(cli: Cli, line: str) -> list[str]:
    """What bash completion offers for ``line`` (the word after its last space is being
    typed), through the environment protocol the installed completion script uses."""
    words = line.split(" ")
    env = {
        "_IMPYARD_COMPLETE": "complete_bash",
        "COMP_WORDS": line,
        "COMP_CWORD": str(len(words) - 1),
    }
    result = cli(env=env)
    assert result.code == 0 and result.stderr == "", result.stderr
    return result.stdout.split()


def test_completion_offers_last_and_the_newest_run_ids(cli: Cli, home: Home) -> None:
    newest = [*many_runs(home, 35), D, C, B, A]
    line = f"impyard --home {home.root}"
    assert complete(cli, f"{line} runs show ") == ["last", *newest[:30]]
    assert complete(cli, f"{line} runs receipts run-20260711T12") == [C, D]
    assert complete(cli, f"{line} candidates retry run-20260710") == [A]
    assert complete(cli, f"{line} quarantine show la") == ["last"]
    assert complete(cli, f"{line} runs show zz") == []


def test_completion_offers_imp_names(cli: Cli, home: Home) -> None:
    for imp in ("yuko", "pia"):
        assert cli("imp", "create", imp).code == 0
    line = f"impyard --home {home.root}"
    assert complete(cli, f"{line} run ") == ["pia", "yuko"]
    assert complete(cli, f"{line} task add y") == ["yuko"]
    assert complete(cli, f"{line} runs list --imp ") == ["pia", "yuko"]
    assert complete(cli, f"{line} candidates list --imp p") == ["pia"]
    assert complete(cli, f"{line} policy show ") == ["pia", "yuko"]
    assert complete(cli, f"{line} knowledge ") == ["provenance", "check", "purge", "pia", "yuko"]
    assert complete(cli, f"{line} knowledge provenance ") == ["pia", "yuko"]
    assert complete(cli, f"{line} knowledge purge p") == ["pia"]
    assert complete(cli, f"{line} memory ") == ["migrate", "pia", "yuko"]
    assert complete(cli, f"{line} notes p") == ["pia"]
    assert complete(cli, f"{line} backup now ") == ["pia", "yuko"]
    assert complete(cli, f"{line} check box --imp y") == ["yuko"]


def test_completion_without_a_data_root_offers_nothing(cli: Cli, tmp_path: Path) -> None:
    line = f"impyard --home {tmp_path / 'nowhere'}"
    assert complete(cli, f"{line} runs show ") == []
    assert complete(cli, f"{line} run ") == []
    assert complete(cli, f"{line} knowledge ") == ["provenance", "check", "purge"]
    assert not (tmp_path / "nowhere").exists()


def test_completion_finds_the_data_root_in_impyard_home(cli: Cli, home: Home) -> None:
    env = {
        **os.environ,
        "IMPYARD_HOME": str(home.root),
        "_IMPYARD_COMPLETE": "complete_bash",
        "COMP_WORDS": "impyard runs show run-20260710",
        "COMP_CWORD": "3",
    }
    done = subprocess.run(
        [sys.executable, "-m", "impyard"], env=env, capture_output=True, text=True, timeout=60
    )
    assert (done.returncode, done.stdout.split(), done.stderr) == (0, [A], "")
