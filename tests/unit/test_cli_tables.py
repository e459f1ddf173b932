"""Tables at 80 columns on a terminal, and as plain aligned text when piped."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from impyard.home import Home
from impyard.queue import tasks
from impyard.queue.db import opened
from tests.helpers.backup import set_remotes
from tests.helpers.cli import Cli
from tests.helpers.repo import NS, RUN, make_imp, note_path, note_text, run_id
from tests.helpers.runs import write_run
from tests.helpers.tty import run_on_terminal
from tests.unit.test_repair import LONG_BODY, rejected_candidate

ANSI = re.compile(r"\x1b\[[0-9;]*m")
QUARANTINED = run_id(3)
LONG_REASON = "the box exited with status 1 after the gateway refused " + "x" * 60
COMMIT = "3f9a2c4e7b1d" + "0" * 28
#: Two columns a character on a terminal: 40 of them fill 80 columns.
WIDE = run_id(4)
WIDE_REASON = "records/取引先/" + "東京の取引先リスト" * 6 + ".md: file-too-large"
WORD = re.compile(r"\w+")

#: (command, headers every width shows, a value that must be shown in full when piped)
TABLES = [
    (("runs", "list"), ["run", "imp", "state", "checkpoint", "exit"], QUARANTINED),
    (("policy", "show", "yuko"), ["key", "value", "source"], '"client_secret"]'),
    (("deploy",), ["limit", "(org)"], "1000000000"),
    (("imp", "list"), ["imp", "agent", "image", "repository"], "repo.git"),
    (("task", "list"), ["task", "imp", "state", "checkpoint"], "yuko"),
    (("candidates", "list"), ["run", "imp", "checkpoint", "reason"], RUN),
    (("backup", "status"), ["imp", "remote", "pushed", "lagging", "state"], "never"),
]


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Home:
    home, repo = make_imp(tmp_path_factory.mktemp("tables"))
    cli = Cli(home=home.root)
    assert cli("deploy").code == 0
    write_run(
        home,
        run_id(2),
        state="finished",
        checkpoint="integrated",
        exit_code=0,
        produced_commit=COMMIT,
    )
    write_run(home, QUARANTINED, state="finished", checkpoint="quarantined", reason=LONG_REASON)
    write_run(home, WIDE, state="finished", checkpoint="quarantined", reason=WIDE_REASON)
    assert cli("task", "add", "yuko", "--prompt", "Find vendors " * 10).code == 0
    rejected_candidate(home, repo, {note_path(): note_text(f"{NS}_1", body=LONG_BODY).encode()})
    deep = home.root.parent / ("a-rather-long-directory-name-for-the-backups-of-this-host" * 2)
    set_remotes(home, [str(deep)])
    return home


@pytest.mark.parametrize(("args", "headers", "whole"), TABLES, ids=lambda v: str(v))
def test_a_table_fits_80_columns_on_a_terminal(
    home: Home, args: tuple[str, ...], headers: list[str], whole: str
) -> None:
    shown = run_on_terminal(home.root, *args, columns=80, env={"NO_COLOR": "1"})
    assert shown.code == 0, shown.stderr
    lines = [ANSI.sub("", line).rstrip() for line in shown.stdout.splitlines()]
    wide = [line for line in lines if len(line) > 80]
    assert not wide, "\n".join(lines)
    header = next(line for line in lines if line.split()[:1] == headers[:1])
    assert all(name in header.split() for name in headers), header


@pytest.mark.parametrize(("args", "headers", "whole"), TABLES, ids=lambda v: str(v))
def test_a_piped_table_is_plain_aligned_text_never_cut(
    home: Home, args: tuple[str, ...], headers: list[str], whole: str
) -> None:
    shown = Cli(home=home.root)(*args, env={"COLUMNS": "80"})
    assert shown.code == 0, shown.stderr
    assert "\x1b" not in shown.stdout
    # Nothing is cut; a task's prompt is a preview of its first words, and says so.
    assert "…" not in shown.stdout.replace("vendors…", "")
    lines = shown.stdout.splitlines()
    header = next(line for line in lines if line.split()[:1] == headers[:1])
    assert all(name in header.split() for name in headers), header
    assert whole in shown.stdout


def test_policy_show_keeps_its_values_at_80_columns(home: Home) -> None:
    shown = run_on_terminal(home.root, "policy", "show", "yuko", columns=80)
    text = ANSI.sub("", shown.stdout)
    row = next(line for line in text.splitlines() if line.startswith("box.image "))
    assert '"impyard-box:latest"' in row
    # A long list wraps within its column: every element is still there.
    assert '"client_secret"]' in text and '"access_token",' in text


def test_states_are_coloured_on_a_terminal_only_and_not_with_no_color(home: Home) -> None:
    coloured = run_on_terminal(home.root, "runs", "list", columns=80)
    plain = run_on_terminal(home.root, "runs", "list", columns=80, env={"NO_COLOR": "1"})
    assert "\x1b[31mquarantined" in coloured.stdout  # red
    assert "\x1b[31m" not in plain.stdout and "quarantined" in plain.stdout
    piped = Cli(home=home.root)("runs", "list")
    assert "\x1b" not in piped.stdout


def test_runs_list_on_a_narrow_terminal_drops_low_value_columns_first(home: Home) -> None:
    # 88 columns with all; at 70 the commit, then the mode, go; the state never does.
    shown = run_on_terminal(home.root, "runs", "list", columns=70, env={"NO_COLOR": "1"})
    header = ANSI.sub("", shown.stdout).splitlines()[0].split()
    assert header == ["run", "imp", "state", "checkpoint", "exit"]


def test_a_long_reason_is_never_cut_when_piped(home: Home) -> None:
    listed = Cli(home=home.root)("runs", "list").stdout
    assert f"{QUARANTINED}  yuko" in listed
    shown = Cli(home=home.root)("task", "list").stdout
    assert ("Find vendors " * 3).strip() in shown


@pytest.mark.parametrize(("args", "headers", "whole"), TABLES, ids=lambda v: str(v))
def test_no_word_is_split_at_80_columns(
    home: Home, args: tuple[str, ...], headers: list[str], whole: str
) -> None:
    """A value folds between words: every word on the terminal is a word of the values
    (a word cut in two would show its halves, words no value holds)."""
    shown = run_on_terminal(home.root, *args, columns=80, env={"NO_COLOR": "1"})
    piped = Cli(home=home.root)(*args)
    split = set(WORD.findall(ANSI.sub("", shown.stdout))) - set(WORD.findall(piped.stdout))
    assert not split, shown.stdout


def test_runs_list_keeps_the_commit_at_80_columns(home: Home) -> None:
    shown = run_on_terminal(home.root, "runs", "list", columns=80, env={"NO_COLOR": "1"})
    header, *rows = shown.stdout.splitlines()
    assert header.split() == ["run", "imp", "state", "checkpoint", "exit", "commit"]
    assert any(row.split()[0] == run_id(2) and row.split()[-1] == COMMIT[:12] for row in rows)


def test_policy_show_piped_folds_at_100_columns_and_keeps_every_column(home: Home) -> None:
    """Piped, policy show is read by people: its values fold under their column instead of
    making every line 200 characters wide, and no column is left out."""
    lines = Cli(home=home.root)("policy", "show", "yuko", env={"COLUMNS": "80"}).stdout
    header = next(line for line in lines.splitlines() if line.startswith("key "))
    assert header.split() == ["key", "value", "source", "overlay", "may"]
    assert max(len(line) for line in lines.splitlines()) <= 100, lines
    names = ["access_token", "token", "key", "api_key", "apikey", "sig", "signature"]
    names += ["password", "secret"]
    tokens = lines.split()
    assert all(f'"{name}",' in tokens or f'["{name}",' in tokens for name in names), lines
    assert '"client_secret"]' in tokens


def test_runs_show_folds_a_long_value_under_itself_on_a_terminal(home: Home) -> None:
    shown = run_on_terminal(home.root, "runs", "show", QUARANTINED, columns=80)
    lines = shown.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines), lines
    at = next(i for i, line in enumerate(lines) if line.startswith("reason "))
    column = lines[at].index("the box")
    folded = [lines[at][column:]]
    folded += [line[column:] for line in lines[at + 1 :] if line[:column].isspace()]
    assert " ".join(folded).split() == LONG_REASON.split()


def test_wide_characters_count_two_columns_when_a_value_folds(home: Home) -> None:
    shown = run_on_terminal(home.root, "runs", "show", WIDE, columns=80)
    lines = shown.stdout.splitlines()
    wide = [line for line in lines if sum(2 if "\u3000" <= c <= "\u9fff" else 1 for c in line) > 80]
    assert not wide, lines
    at = next(i for i, line in enumerate(lines) if line.startswith("reason "))
    folded = "".join(
        line.split(maxsplit=1)[-1] if i == 0 else line.strip()
        for i, line in enumerate(lines[at : at + 4])
    )
    assert folded.startswith("".join(WIDE_REASON.split())), lines


def test_a_prompt_is_previewed_to_a_word_and_kept_at_80_columns(home: Home) -> None:
    """A task's prompt shows its first words, cut between two and saying so; at 80
    columns it stays, folded in its column."""
    piped = Cli(home=home.root)("task", "list").stdout
    assert "Find vendors Find vendors Find vendors…" in piped, piped
    assert "Find vendors F\n" not in piped + "\n"
    shown = run_on_terminal(home.root, "task", "list", columns=80, env={"NO_COLOR": "1"})
    header = shown.stdout.splitlines()[0].split()
    assert header[-1] == "prompt", header
    assert "vendors…" in shown.stdout.split()


def test_a_narrow_task_list_keeps_the_prompt_longest(tmp_path: Path) -> None:
    """A task that ran fills the run column (31 characters): at 80 columns the rework and
    the mode go, then the run; what the task asked stays."""
    home, _ = make_imp(tmp_path)
    with opened(home.db) as conn:
        task = tasks.add(conn, "yuko", "Find vendors of single sign-on in Europe")
        tasks.finish(conn, task.id, checkpoint="integrated", run_id=run_id(5))
    shown = run_on_terminal(home.root, "task", "list", columns=80, env={"NO_COLOR": "1"})
    header = shown.stdout.splitlines()[0].split()
    assert header == ["task", "imp", "state", "checkpoint", "reason", "prompt"], shown.stdout
    assert "Europe" in shown.stdout.split()
