"""``impyard agents``: every agent an imp can run, its image's state in this engine, and
what its route needs; ``imp create --agent`` refuses an agent that is not one of them."""

from __future__ import annotations

import json
from pathlib import Path

from impyard.box.images.agents import AGENTS
from tests.helpers.cli import Cli
from tests.helpers.fake_engine import engine_with_images


def test_agents_lists_every_agent_with_its_image_state(tmp_path: Path) -> None:
    cli = Cli(tmp_path / "home")
    built = next(iter(AGENTS.values())).image
    with engine_with_images((built,)) as engine:
        listed = cli("agents", "--json", env=engine)
    assert listed.code == 0, listed.stderr
    document = json.loads(listed.stdout)
    rows = {row["name"]: row for row in document["agents"]}
    assert set(rows) == set(AGENTS)
    for name, row in rows.items():
        agent = AGENTS[name]
        assert row["image"] == agent.image and row["package"] == agent.package
        assert row["version"] == agent.version != ""
        assert row["api"] == agent.api and row["built"] is (agent.image == built)
        assert "IMPYARD_MODEL" in row["box_env"]
    assert document["engine_problem"] is None


def test_agents_says_when_the_engine_cannot_tell_what_is_built(tmp_path: Path) -> None:
    cli = Cli(tmp_path / "home")
    listed = cli("agents", env={"DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"})
    assert listed.code == 0
    assert "cannot tell which images are built" in listed.stderr
    for name in AGENTS:
        assert name in listed.stdout


def test_an_unknown_agent_is_refused_naming_every_known_one(tmp_path: Path) -> None:
    cli = Cli(tmp_path / "home")
    assert cli("init").code == 0
    refused = cli("imp", "create", "ada", "--agent", "nosuch")
    assert refused.code != 0
    assert "unknown agent 'nosuch'" in refused.stderr
    for name in AGENTS:
        assert name in refused.stderr


def test_creating_an_existing_imp_with_an_agent_points_at_imp_set(tmp_path: Path) -> None:
    cli = Cli(tmp_path / "home")
    assert cli("init").code == 0
    assert cli("imp", "create", "ada").code == 0
    again = cli("imp", "create", "ada", "--agent", "pi")
    assert again.code == 2
    assert "`impyard imp set ada --agent pi`" in again.stderr
