"""Which command lines a foreground run hands to a running serve: exactly those it reads
as ``run`` reads them; anything else runs in-process, where the CLI answers it."""

from __future__ import annotations

import pytest

from impyard.cli.running.handoff import _in_process, handed_settings, parse


def test_a_plain_run_is_read_with_its_options() -> None:
    options = ["--command=c", "--timeout", "2.5", "--channel", "ch", "--reorganize", "--raw"]
    parsed = parse(["--home", "/h", "run", "yuko", "--prompt", "p", *options, "--json"])
    assert parsed == {
        "home": "/h",
        "imp": "yuko",
        "prompt": "p",
        "command": "c",
        "timeout_seconds": 2.5,
        "channel": "ch",
        "reorganize": True,
        "raw": True,
        "json": True,
    }
    assert parse(["run", "--prompt-file", "-", "yuko"]) == {
        "home": None,
        "prompt_file": "-",
        "imp": "yuko",
    }
    # A value that looks like an option is the option's value, as click reads it.
    assert parse(["run", "yuko", "--prompt", "--json"]) == {
        "home": None,
        "imp": "yuko",
        "prompt": "--json",
    }


@pytest.mark.parametrize(
    "args",
    [
        ["run", "yuko", "--prompt", "p", "--detach"],
        ["run", "yuko", "--prompt", "p", "-d"],
        ["run", "--help"],
        ["run", "yuko", "--prompt", "p", "--prompt", "q"],
        ["run", "yuko", "--prompt", "p", "--json", "--json"],
        ["run", "yuko", "--prompt", "p", "--prompt-file", "f"],
        ["run", "yuko"],
        ["run", "--prompt", "p"],
        ["run", "yuko", "other", "--prompt", "p"],
        ["run", "yuko", "--prompt", "p", "--timeout", "0"],
        ["run", "yuko", "--prompt", "p", "--timeout", "nan"],
        ["run", "yuko", "--prompt", "p", "--timeout", "soon"],
        ["run", "yuko", "--prompt"],
        ["run", "yuko", "--prompt", "p", "--", "x"],
        ["run", "yuko", "--prompt", "p", "--unknown"],
        ["--version", "run", "yuko", "--prompt", "p"],
        ["runs", "list"],
        ["imp", "run", "yuko", "--prompt", "p"],
    ],
)
def test_anything_else_runs_in_process(args: list[str]) -> None:
    assert parse(args) is None


def test_settings_compared_are_impyards_but_the_data_roots() -> None:
    environ = {
        "IMPYARD_HOME": "/h",
        "IMPYARD_HANDOFF": "1",
        "impyard_concurrency": "3",
        "PATH": "/",
    }
    assert list(handed_settings(environ)) == ["IMPYARD_CONCURRENCY"]
    # Compared by digest: a secret's value is never sent to serve.
    secret = {"IMPYARD_SECRET_LLM": "sk-live-1234"}
    assert "sk-live-1234" not in str(handed_settings(secret))
    assert handed_settings(secret) == handed_settings(dict(secret))
    assert handed_settings(secret) != handed_settings({"IMPYARD_SECRET_LLM": "sk-live-9"})


def test_a_prompt_read_from_stdin_is_given_in_process_as_a_prompt() -> None:
    args = ["run", "yuko", "--prompt-file", "-", "--json"]
    assert _in_process(args, {"prompt_from_stdin": "text"}) == [
        "run",
        "yuko",
        "--prompt",
        "text",
        "--json",
    ]
    assert _in_process(["run", "yuko", "--prompt-file=-"], {"prompt_from_stdin": "t"}) == [
        "run",
        "yuko",
        "--prompt",
        "t",
    ]
    assert _in_process(args, {}) == args
