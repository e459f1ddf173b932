"""Backup over the network: a real ``git daemon`` on loopback that accepts pushes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pygit2
import pytest

from impyard import backup
from impyard.backup.status import read_status
from impyard.home import Home
from impyard.knowledge.change import Change
from impyard.knowledge.imps import open_repo
from impyard.knowledge.integration.quarantine import quarantine
from impyard.knowledge.store.repo import main_commit
from tests.helpers.backup import backed_up, land_note, refs, reject_note, set_remotes
from tests.helpers.cli import Cli
from tests.helpers.gitdaemon import daemon_available, git_daemon
from tests.helpers.repo import assert_fsck_clean, make_imp, run_id

pytestmark = pytest.mark.skipif(
    not daemon_available(), reason="this git has no `git daemon` (git-daemon-run/-sysvinit)"
)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A directory served by ``git daemon`` (receive-pack on), and its base URL."""
    base = tmp_path / "served"
    base.mkdir()
    with git_daemon(base) as url:
        yield base, url
        backup.flush(30)  # no push of this test may outlive its daemon unnoticed


def test_pushes_and_restores_through_a_git_daemon(
    tmp_path: Path, served: tuple[Path, str], cli: Cli
) -> None:
    base, url = served
    home, _ = make_imp(tmp_path)
    pygit2.init_repository(str(base / "yuko.git"), bare=True)  # a server's repos are its owner's
    set_remotes(home, [url])
    land_note(home, 1)
    candidate = reject_note(home, 2)
    repo = open_repo(home, "yuko")
    quarantine(repo, run_id(3), main_commit(repo), Change(), "killed")
    backup.notify(home, "yuko")
    assert backup.flush(30)
    assert backed_up(base / "yuko.git") == backed_up(home.repo("yuko"))
    entry = read_status(home)["yuko"][url]
    assert not entry.failing and entry.pushed_main == main_commit(repo)

    repo.references.delete(candidate)  # deletions travel over the wire too
    land_note(home, 4)
    backup.notify(home, "yuko")
    assert backup.flush(30)
    assert backed_up(base / "yuko.git") == backed_up(home.repo("yuko"))

    # Restore from the daemon into a new data root: a URL names its imps.
    before = refs(home.repo("yuko"))
    elsewhere = Cli(tmp_path / "elsewhere")
    assert elsewhere("restore", "--from", url).code == 1  # cannot list a URL
    restored = elsewhere("restore", "--from", url, "--imp", "yuko")
    assert restored.code == 0, restored.stderr
    again = Home(elsewhere.home)
    assert refs(again.repo("yuko")) == before
    assert_fsck_clean(again.repo("yuko"))


def test_a_missing_repository_on_the_server_is_a_failure_not_a_hang(
    tmp_path: Path, served: tuple[Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("impyard.backup.push.BACKOFF_SECONDS", 0.01)
    _, url = served
    home, _ = make_imp(tmp_path)
    set_remotes(home, [url])
    backup.notify(home, "yuko")
    assert backup.flush(60)
    entry = read_status(home)["yuko"][url]
    assert entry.failing and "yuko.git" in (entry.last_error or "")
