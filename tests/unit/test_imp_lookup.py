"""A typed imp name that is no imp: every command that takes one refuses it in one line,
naming the closest imps, before it prints, follows or starts anything."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.cli import Cli

#: Nothing listens there: a command that reached for the engine fails at once.
NO_ENGINE = {"DOCKER_HOST": "tcp://127.0.0.1:9"}

#: Each command that takes an imp, with the typo ``yuk`` where the imp goes.
TAKES_AN_IMP = [
    ("run", "yuk", "--prompt", "p", "--command", "true"),
    ("task", "add", "yuk", "--prompt", "p"),
    ("imp", "set", "yuk", "--command", "true"),
    ("imp", "rm", "yuk"),
    ("knowledge", "yuk"),
    ("knowledge", "provenance", "yuk", "records/a/b--n_0123456789ab_1.md"),
    ("knowledge", "check", "yuk"),
    ("memory", "yuk", "list"),
    ("policy", "show", "yuk"),
    ("runs", "list", "--imp", "yuk"),
    ("candidates", "list", "--imp", "yuk"),
    ("quarantine", "list", "--imp", "yuk"),
    ("journal", "--imp", "yuk"),
    ("journal", "-f", "--imp", "yuk"),
    ("check", "box", "--imp", "yuk"),
]


@pytest.fixture
def yard(cli: Cli) -> Cli:
    assert cli("init").code == 0
    for imp in ("yuko", "abe"):
        assert cli("imp", "create", imp).code == 0
    return cli


@pytest.mark.parametrize("argv", TAKES_AN_IMP, ids=lambda argv: " ".join(argv[:2]))
def test_every_command_taking_an_imp_names_the_closest(yard: Cli, argv: tuple[str, ...]) -> None:
    refused = yard(*argv, env=NO_ENGINE)
    assert refused.code == 2, refused
    assert refused.stdout == ""
    lines = refused.stderr.splitlines()
    assert len(lines) == 1, refused.stderr
    assert lines[0].startswith("impyard: error: no imp named 'yuk'")
    assert lines[0].endswith("(did you mean 'yuko'?)")


def test_a_name_close_to_none_says_how_to_create_it(yard: Cli) -> None:
    refused = yard("task", "add", "zzzz", "--prompt", "p")
    assert refused.code == 2
    assert refused.stderr == (
        "impyard: error: no imp named 'zzzz' (create it with `impyard imp create zzzz`)\n"
    )


def test_an_invalid_name_close_to_an_imp_names_it_too(yard: Cli) -> None:
    refused = yard("imp", "rm", "Yuko")
    assert refused.code == 2
    assert "invalid imp name 'Yuko'" in refused.stderr
    assert refused.stderr.rstrip().endswith("(did you mean 'yuko'?)")


def test_following_the_journal_of_no_imp_is_refused_at_once(tmp_path: Path) -> None:
    # As a process: before, the follower waited for events of 'nobody' forever.
    yard = Cli(home=tmp_path / "home", in_process=False)
    assert yard("init").code == 0
    assert yard("imp", "create", "yuko").code == 0
    followed = yard("journal", "-f", "--imp", "nobody", timeout=60)
    assert followed.code == 2 and followed.stdout == ""
    assert followed.stderr.startswith("impyard: error: no imp named 'nobody'")
    assert followed.stderr.count("\n") == 1
    # A removed imp is no typo: the journal keeps its events, and they still read.
    assert yard("imp", "create", "abe").code == 0 and yard("imp", "rm", "abe").code == 0
    shown = yard("journal", "--imp", "abe")
    assert shown.code == 0, shown.stderr
    assert "imp.removed imp=abe" in shown.stdout
