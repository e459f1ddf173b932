"""Every command's help at 80 columns, and usage errors as one line (plus one hint)."""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterator
from typing import Any

import pytest
import typer

from impyard.cli.main import app
from tests.helpers.cli import Cli

#: What typer prints for a parameter's Python type unless told otherwise.
PLACEHOLDER = re.compile(r"<(bool|str|int|float|list\[\w+\])>|<\w+ range>| <path>|\{[a-z_]+\}")


def _paths(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    if getattr(command, "hidden", False):
        return
    yield path
    for name, sub in getattr(command, "commands", {}).items():
        yield from _paths(sub, (*path, name))


ROOT = typer.main.get_command(app)
COMMANDS = sorted(_paths(ROOT))


def _command(path: tuple[str, ...]) -> Any:
    command: Any = ROOT
    for name in path:
        command = command.commands[name]
    return command


GROUPS = [path for path in COMMANDS if getattr(_command(path), "commands", None)]


def test_the_walk_finds_the_command_tree() -> None:
    assert ("run",) in COMMANDS and ("policy", "show") in COMMANDS
    assert ("memory", "IMP", "add") in COMMANDS
    assert len(COMMANDS) > 50


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p) or "impyard")
def test_help_fits_80_columns_without_type_placeholders(path: tuple[str, ...], cli: Cli) -> None:
    long_form = cli(*path, "--help", env={"COLUMNS": "80"})
    short_form = cli(*path, "-h", env={"COLUMNS": "80"})
    assert long_form.code == 0, long_form.stderr
    assert short_form.stdout == long_form.stdout
    text = long_form.stdout
    assert text.startswith("Usage: impyard")
    wide = [line for line in text.splitlines() if len(line) > 80]
    assert not wide, wide
    assert not PLACEHOLDER.search(text), PLACEHOLDER.findall(text)
    assert "╭" not in text and "│" not in text  # no boxes


def test_flags_show_no_value_and_arguments_their_name(cli: Cli) -> None:
    text = cli("run", "-h", env={"COLUMNS": "80"}).stdout
    assert "Usage: impyard run [OPTIONS] IMP\n" in text
    assert re.search(r"^  --reorganize +Take", text, re.M), text
    assert re.search(r"^  --prompt-file PATH +Read", text, re.M), text
    assert "--timeout SECONDS" in text
    runs = cli("runs", "show", "-h", env={"COLUMNS": "80"}).stdout
    assert "Usage: impyard runs show [OPTIONS] RUN\n" in runs


def test_help_paragraphs_are_rewrapped_not_cut_at_source_lines(cli: Cli) -> None:
    # gc's docstring spans several source lines; help joins them into one paragraph.
    text = cli("gc", "-h", env={"COLUMNS": "80"}).stdout
    summary = text.split("\n\n")[1]
    lines = summary.splitlines()
    assert all(len(line) > 60 for line in lines[:-1]), summary


@pytest.mark.parametrize("path", GROUPS, ids=lambda p: " ".join(p) or "impyard")
def test_a_group_lists_each_command_with_its_whole_summary(path: tuple[str, ...], cli: Cli) -> None:
    """Each command's first help paragraph, folded onto more lines at 80 columns, where
    click would cut it short with '...' at the end of one line."""
    text = cli(*path, "-h", env={"COLUMNS": "80"}).stdout
    listing = "".join(text.split("Commands:\n", 1)[1].split())
    for name, sub in _command(path).commands.items():
        if sub.hidden or not sub.help:
            continue
        summary = inspect.cleandoc(sub.help).split("\n\n")[0]
        assert "".join(f"{name} {summary}".split()) in listing, (name, summary, text)


@pytest.mark.parametrize(
    ("args", "hint", "words"),
    [
        (("run",), "impyard run -h", "Missing argument 'IMP'"),
        (("run", "ada", "--bogus"), "impyard run -h", "No such option: --bogus"),
        (("run", "ada", "--timeout", "soon"), "impyard run -h", "'--timeout'"),
        (("runs", "list", "-n", "0"), "impyard runs list -h", "'--lines'"),
        (("no-such-command",), "impyard -h", "No such command 'no-such-command'"),
        (("policy", "show", "ada", "extra"), "impyard policy show -h", "extra"),
    ],
)
def test_a_usage_error_is_one_line_and_a_hint(
    args: tuple[str, ...], hint: str, words: str, both_cli: Cli
) -> None:
    result = both_cli(*args, env={"COLUMNS": "80"})
    assert result.code == 2
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 2, result.stderr
    assert lines[0].startswith("impyard: error: ") and words in lines[0]
    assert lines[1] == f"(see '{hint}')"
