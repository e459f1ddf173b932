"""`impyard imp set` and `impyard imp rm` through the real CLI."""

from __future__ import annotations

import json

import pytest

from impyard.home import Home
from tests.helpers.cli import Cli
from tests.helpers.fake_engine import engine_with_images
from tests.helpers.git import git
from tests.helpers.repo import run_id
from tests.helpers.runs import write_run


@pytest.fixture
def ada(cli: Cli) -> Cli:
    assert cli("init").code == 0
    assert cli("imp", "create", "ada").code == 0
    return cli


def settings(cli: Cli) -> dict[str, str | None]:
    [row] = json.loads(cli("imp", "list", "--json").stdout)
    return {k: row[k] for k in ("image", "command", "agent")}


def test_set_changes_image_command_and_agent(ada: Cli) -> None:
    with engine_with_images() as engine:
        done = ada("imp", "set", "ada", "--image", "img:2", env=engine)
    assert done.code == 0, done.stderr
    assert done.stdout.strip() == "imp ada: image=img:2  command=-  agent=-"
    assert settings(ada) == {"image": "img:2", "command": None, "agent": None}

    assert ada("imp", "set", "ada", "--agent", "pi").code == 0
    pi = settings(ada)
    assert pi["agent"] == "pi" and pi["image"] == "impyard-pi:latest" and pi["command"]

    # The owner's own command replaces the agent's: the imp no longer runs that agent.
    assert ada("imp", "set", "ada", "--command", "echo hi").code == 0
    assert settings(ada) == {"image": "impyard-pi:latest", "command": "echo hi", "agent": None}

    # An empty value gives the setting back to the policy.
    assert ada("imp", "set", "ada", "--image", "", "--command", "", "--json").code == 0
    assert settings(ada) == {"image": None, "command": None, "agent": None}
    journal = (ada.home / "journal.jsonl").read_text().splitlines()
    assert sum('"imp.settings"' in line for line in journal) == 4


def test_set_refuses_nothing_to_set_an_agent_with_a_command_and_an_unknown_imp(
    ada: Cli,
) -> None:
    nothing = ada("imp", "set", "ada")
    assert nothing.code == 2 and "nothing to set" in nothing.stderr
    both = ada("imp", "set", "ada", "--agent", "pi", "--command", "x")
    assert both.code == 2 and "leave out --command" in both.stderr
    unknown = ada("imp", "set", "nobody", "--image", "x")
    assert unknown.code == 2 and "no imp named 'nobody'" in unknown.stderr
    assert settings(ada) == {"image": None, "command": None, "agent": None}


def test_rm_keeps_the_knowledge_aside_and_the_imp_is_gone(ada: Cli) -> None:
    removed = ada("imp", "rm", "ada")
    assert removed.code == 0, removed.stderr
    [kept] = (ada.home / "removed").iterdir()
    assert kept.name.startswith("ada-") and kept.name.endswith("Z")
    assert removed.stdout.strip() == f"removed imp ada; its knowledge is kept in {kept}"
    # Still a whole repository, readable with plain git.
    log = git("--git-dir", kept / "repo.git", "log", "--oneline").stdout
    assert "Create knowledge repository for ada" in log
    assert json.loads(ada("imp", "list", "--json").stdout) == []
    again = ada("run", "ada", "--prompt", "hello")
    assert again.code == 2 and "no imp named 'ada'" in again.stderr
    [event] = [
        json.loads(line)
        for line in (ada.home / "journal.jsonl").read_text().splitlines()
        if '"imp.removed"' in line
    ]
    assert event["imp"] == "ada" and event["moved_to"] == str(kept) and not event["purged"]
    # The name is free again: a new imp starts with a new repository.
    assert ada("imp", "create", "ada").code == 0


def test_rm_purge_deletes_the_knowledge(ada: Cli) -> None:
    removed = ada("imp", "rm", "ada", "--purge-knowledge", "--json")
    assert removed.code == 0, removed.stderr
    assert json.loads(removed.stdout) == {"imp": "ada", "moved_to": None, "purged": True}
    assert list((ada.home / "removed").iterdir()) == []
    assert not (ada.home / "knowledge" / "ada").exists()


def test_rm_refuses_while_a_task_is_queued_or_a_run_unfinished(ada: Cli) -> None:
    added = json.loads(ada("task", "add", "ada", "--prompt", "hi", "--json").stdout)
    queued = ada("imp", "rm", "ada")
    assert queued.code == 2
    assert f"task {added['id']} is queued" in queued.stderr
    assert len(queued.stderr.splitlines()) == 1
    assert ada("task", "cancel", added["id"]).code == 0

    home = Home(ada.home)
    write_run(home, run_id(7), imp="ada", state="running")
    running = ada("imp", "rm", "ada")
    assert running.code == 2 and f"run {run_id(7)} is running" in running.stderr
    assert (ada.home / "knowledge" / "ada" / "repo.git").is_dir()

    write_run(home, run_id(7), imp="ada", state="finished", checkpoint="empty")
    assert ada("imp", "rm", "ada").code == 0


def test_rm_of_an_unknown_imp_says_so(ada: Cli) -> None:
    gone = ada("imp", "rm", "nobody")
    assert gone.code == 2 and "no imp named 'nobody'" in gone.stderr


def test_an_image_is_not_set_when_the_engine_cannot_be_asked(ada: Cli) -> None:
    dead = {"DOCKER_HOST": "tcp://127.0.0.1:9"}  # nothing listens: refused at once
    for argv in (("imp", "set", "ada"), ("imp", "create", "bob")):
        refused = ada(*argv, "--image", "img:2", env=dead)
        assert refused.code == 1, refused
        assert refused.stderr == (
            "impyard: error: cannot check that image img:2 is in the engine, so it is not "
            "set: cannot reach the Docker engine at tcp://127.0.0.1:9: connection refused\n"
        )
    assert settings(ada) == {"image": None, "command": None, "agent": None}
