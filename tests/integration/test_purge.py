"""``knowledge purge`` through the real CLI after real runs: a string planted in three
landed notes, a candidate, a quarantine (its kept checkout a loop image), box logs, a
task file and a backup remote is nowhere afterwards (scanned without Impyard's code),
the dry run's counts are the purge's, every repository passes ``git fsck --strict``,
and the next run lands; a source purge names and keeps a note resting on other
sources while the rest goes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.cli import Cli
from tests.helpers.cli import run_json as run
from tests.helpers.git import git
from tests.helpers.policy import edit_org
from tests.helpers.scan import fsck, holders

pytestmark = pytest.mark.docker

SECRET = "sk-live-4f9a2c77"
LEAK = "https://leak.example/paste"


def note(slug: str, body: str, *sources: str) -> str:
    cited = " ".join(f"--source {url}" for url in sources or ("https://example.com/r",))
    return f'printf "{body}\\n" | impyard-note vendors {slug} {cited}'


def records(cli: Cli) -> list[str]:
    repo = cli("knowledge", "yuko").stdout.strip()
    return git("-C", repo, "ls-tree", "-r", "--name-only", "main", "records").stdout.split()


@pytest.fixture
def yard(yuko: Cli, tmp_path: Path) -> tuple[Cli, Path]:
    """Imp yuko, backed up to a remote on this machine."""
    cli = yuko
    remote = tmp_path / "backups"
    edit_org(cli.home, "remotes = []", f"remotes = {json.dumps([str(remote)])}")
    assert cli("deploy").code == 0
    return cli, remote


@pytest.mark.one_runtime
def test_a_purged_string_is_nowhere_after_real_runs(yard: tuple[Cli, Path]) -> None:
    cli, remote = yard
    for n in (1, 2, 3):
        code, landed = run(cli, f"{note(f'n{n}', f'key {SECRET}')}; echo saw {SECRET}")
        assert code == 0 and landed["checkpoint"] == "integrated", landed
    readme = f'{note("r", "fine")}; echo {SECRET} >> "$IMPYARD_KNOWLEDGE_DIR/README.md"'
    code, refused = run(cli, readme)
    assert code == 3 and refused["candidate_ref"], refused
    code, broken = run(cli, f"{note('q', f'half {SECRET}')}; exit 1", prompt=f"find {SECRET}")
    assert broken["checkpoint"] == "quarantined" and broken["quarantine_ref"], broken
    assert cli("backup", "now").code == 0
    needle = SECRET.encode()
    assert holders(cli.home, needle) and holders(remote, needle)

    preview = cli("knowledge", "purge", "yuko", "--text", SECRET, "--dry-run", "--json")
    assert preview.code == 0, preview.stderr
    promised = json.loads(preview.stdout)
    assert promised["counts"]["files"] >= 5 and promised["counts"]["kept_checkouts"] == 1
    assert holders(cli.home, needle)
    done = cli("knowledge", "purge", "yuko", "--text", SECRET, "--json")
    assert done.code == 0, done.stdout + done.stderr
    result = json.loads(done.stdout)
    assert result["counts"] == promised["counts"] and result["complete"], result
    assert result["check"] == []

    assert holders(cli.home, needle) == []
    assert holders(remote, needle) == []
    repo = Path(cli("knowledge", "yuko").stdout.strip())
    for git_dir in (repo, repo.parent / "origin.git", remote / "yuko.git"):
        assert fsck(git_dir) == "", git_dir
    assert SECRET not in cli("journal", "--json").stdout
    # The imp goes on: its next run checks out the new history and lands.
    code, after = run(cli, note("after", "fresh"))
    assert code == 0 and after["checkpoint"] == "integrated", after


@pytest.mark.one_runtime
def test_a_source_purge_names_and_keeps_a_note_resting_on_other_sources(
    yard: tuple[Cli, Path],
) -> None:
    cli, _ = yard
    both = f"{note('only', 'from the paste', LEAK)}; {note('both', 'two', LEAK, 'https://example.com/r')}"
    code, landed = run(cli, f"{both}; {note('other', 'unrelated')}")
    assert code == 0 and landed["checkpoint"] == "integrated", landed
    before = records(cli)
    done = cli("knowledge", "purge", "yuko", "--source", LEAK)
    assert done.code == 0, done.stdout + done.stderr
    assert "it also cites other sources (not cleared)" in done.stdout
    after = records(cli)
    gone = sorted(set(before) - set(after))
    assert [path.split("/")[-1].split("--")[0] for path in gone] == ["only"]
    assert any("/both--" in path for path in after) and any("/other--" in path for path in after)
