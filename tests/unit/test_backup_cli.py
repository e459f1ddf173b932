"""``impyard backup status|now`` through the real CLI."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from impyard import backup
from impyard.home import Home
from impyard.knowledge.imps import open_repo
from impyard.knowledge.store.repo import main_commit
from tests.helpers.backup import backed_up, land_note, set_remotes
from tests.helpers.cli import Cli
from tests.helpers.gitdaemon import free_port


def setup(cli: Cli, *imps: str) -> Home:
    assert cli("init").code == 0
    for imp in imps:
        assert cli("imp", "create", imp).code == 0
    return Home(cli.home)


def test_backup_now_pushes_every_imp_and_status_shows_no_lag(cli: Cli, tmp_path: Path) -> None:
    home = setup(cli, "yuko", "kai")
    assert cli("backup", "now").code == 2  # nothing configured yet
    base = tmp_path / "backups"
    set_remotes(home, [str(base)])

    status = cli("backup", "status", "--json")
    assert status.code == 0
    assert [(r["imp"], r["remote"], r["lagging"]) for r in json.loads(status.stdout)] == [
        ("kai", str(base), True),
        ("yuko", str(base), True),
    ]

    now = cli("backup", "now")
    assert now.code == 0, now.stderr
    assert now.stdout.count(" ok (") == 2 and "yuko" in now.stdout and "kai" in now.stdout
    for imp in ("yuko", "kai"):
        assert backed_up(base / f"{imp}.git") == backed_up(home.repo(imp))

    land_note(home, 1)  # landed, not yet pushed (nobody notified)
    status = cli("backup", "status")
    assert status.code == 0
    header, *lines = [re.split(r"  +", line) for line in status.stdout.splitlines()]
    assert header == ["imp", "remote", "pushed", "lagging", "main", "state"]
    lagging = {row[0]: row[3] for row in lines}
    assert lagging == {"yuko": "yes", "kai": "no"}

    one = cli("backup", "now", "yuko", "--json")
    assert one.code == 0
    [row] = json.loads(one.stdout)
    assert row["ok"] and row["main"] == main_commit(open_repo(home, "yuko"))
    rows = json.loads(cli("backup", "status", "--json").stdout)
    assert all(not r["lagging"] and not r["failing"] and r["pushed_at"] for r in rows)
    assert cli("backup", "now", "nobody").code == 2


def test_a_failing_remote_makes_both_commands_fail(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("impyard.backup.push.BACKOFF_SECONDS", 0.01)
    home = setup(cli, "yuko")
    down = f"git://127.0.0.1:{free_port()}/"
    set_remotes(home, [str(tmp_path / "backups"), down])
    now = cli("backup", "now")
    assert now.code == 1
    assert " ok (" in now.stdout and "FAILED after" in now.stdout and "refused" in now.stdout
    status = cli("backup", "status")
    assert status.code == 1
    _, ok, failing = [re.split(r"  +", line) for line in status.stdout.splitlines()]
    assert ok[-1] == "current" and failing[-1].startswith("failing since")
    assert failing[3] == "yes" and "refused" in failing[-1]
    rows = json.loads(cli("backup", "status", "--json").stdout)
    assert [r["failing"] for r in rows] == [False, True]


def test_status_without_remotes_says_so(cli: Cli) -> None:
    setup(cli, "yuko")
    status = cli("backup", "status")
    assert status.code == 0 and "no backup remotes configured" in status.stdout
    assert json.loads(cli("backup", "status", "--json").stdout) == []
    backup.flush(10)
