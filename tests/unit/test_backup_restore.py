"""``impyard restore``: the drill (back up, lose the data root, init, restore, run on), an imp
brought up to its backup in place, and the refusal to restore over work the backup lacks."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import zlib
from pathlib import Path

import pygit2
import pytest

from impyard import backup
from impyard.backup.sync import backup_imp
from impyard.home import Home
from impyard.journal.log import Journal
from impyard.knowledge.change import MESSAGE_CHARS, Change, KnowledgeLimits
from impyard.knowledge.gates.repogate import MAX_COMMIT_LINE
from impyard.knowledge.gates.treegate import GateLimits
from impyard.knowledge.imps import open_repo, read_imp_settings
from impyard.knowledge.integration.quarantine import quarantine
from impyard.knowledge.store.repo import main_commit
from impyard.policy.compile import policy_for_run
from tests.helpers.backup import backed_up, land_note, refs, reject_note, set_remotes
from tests.helpers.bombs import GIB, bomb_backup, peak_rss
from tests.helpers.cli import Cli
from tests.helpers.fake_engine import engine_with_images
from tests.helpers.git import GIT_ENV, git
from tests.helpers.gitdaemon import git_daemon
from tests.helpers.hostile_trees import knowledge_tree, raw_commit, raw_tree
from tests.helpers.repo import assert_fsck_clean, run_id


def populated(cli: Cli, base: Path) -> Home:
    """Two imps with landed notes, a candidate and a quarantine, backed up to ``base``."""
    assert cli("init").code == 0
    with engine_with_images() as engine:
        created = cli(
            "imp", "create", "yuko", "--image", "img:1", "--command", "run-me", env=engine
        )
    assert created.code == 0
    assert cli("imp", "create", "kai").code == 0
    home = Home(cli.home)
    set_remotes(home, [str(base)])
    for n in range(1, 4):
        land_note(home, n)
    reject_note(home, 4)
    repo = open_repo(home, "yuko")
    quarantine(repo, run_id(5), main_commit(repo), Change(), "killed")
    land_note(home, 6, imp="kai")
    assert cli("backup", "now").code == 0
    return home


def test_the_restore_drill_gives_back_identical_repositories(cli: Cli, tmp_path: Path) -> None:
    base = tmp_path / "backups"
    home = populated(cli, base)
    before = {imp: refs(home.repo(imp)) for imp in ("yuko", "kai")}
    settings = read_imp_settings(home, "yuko")
    backup.flush(30)

    shutil.rmtree(home.root)  # the disk is gone
    assert cli("init").code == 0
    # yuko's image and command are not the defaults: the owner confirms them.
    assert cli("restore", "--from", str(base)).code == 1
    restored = cli("restore", "--from", str(base), "--accept-settings")
    assert restored.code == 0, restored.stderr
    assert "yuko: restored" in restored.stdout and "kai: restored" in restored.stdout
    assert "  image 'img:1', command 'run-me', agent -" in restored.stdout

    for imp in ("yuko", "kai"):
        repo_path = Path(cli("knowledge", imp).stdout.strip())
        assert repo_path == home.repo(imp)
        assert refs(repo_path) == before[imp]  # git for-each-ref, every ref
        assert_fsck_clean(repo_path)
        assert_fsck_clean(home.origin(imp))
        assert refs(home.origin(imp)) == {"refs/heads/main": before[imp]["refs/heads/main"]}
    assert read_imp_settings(home, "yuko") == settings  # image and command came back
    listed = json.loads(cli("imp", "list", "--json").stdout)
    assert [(row["imp"], row["image"]) for row in listed] == [("kai", None), ("yuko", "img:1")]
    assert {e["imp"] for e in Journal(home.journal).read(event="backup.restored")} == {
        "yuko",
        "kai",
    }

    # The lane works at once on a restored imp, and its next push continues the backup.
    result = land_note(home, 7)
    set_remotes(home, [str(base)])
    [pushed] = backup_imp(home, "yuko")
    assert pushed.ok and backed_up(base / "yuko.git")["refs/heads/main"] == result.commit


def test_restore_initializes_a_missing_data_root_and_takes_named_imps(
    cli: Cli, tmp_path: Path
) -> None:
    base = tmp_path / "backups"
    home = populated(cli, base)
    backup.flush(30)
    shutil.rmtree(home.root)
    restored = cli("restore", "--from", f"file://{base}", "--imp", "kai", "--json")
    assert restored.code == 0, restored.stderr
    [row] = json.loads(restored.stdout)
    assert (row["imp"], row["created"], row["settings"]) == ("kai", True, "backup")
    assert home.is_initialized()
    assert json.loads(cli("imp", "list", "--json").stdout)[0]["imp"] == "kai"
    assert cli("restore", "--from", str(base), "--imp", "nobody").code != 0


def test_an_imp_behind_its_backup_is_brought_up_to_it(cli: Cli, tmp_path: Path) -> None:
    base = tmp_path / "backups"
    home = populated(cli, base)
    backup.flush(30)
    # A copy of the data root from before the last landing and candidate, say.
    repo = open_repo(home, "yuko")
    behind = repo.revparse_single("main~1").id
    repo.references["refs/heads/main"].set_target(behind)
    for name in list(repo.references):
        if name.startswith(("refs/candidates/", "refs/quarantine/")):
            repo.references.delete(name)
    git("-C", home.origin("yuko"), "update-ref", "refs/heads/main", str(behind))

    restored = cli("restore", "--from", str(base), "--imp", "yuko")
    assert restored.code == 0, restored.stderr
    assert "brought up to the backup" in restored.stdout and "settings kept" in restored.stdout
    assert backed_up(home.repo("yuko")) == backed_up(base / "yuko.git")
    main = main_commit(open_repo(home, "yuko"))
    assert main == backed_up(base / "yuko.git")["refs/heads/main"] != str(behind)
    assert refs(home.origin("yuko"))["refs/heads/main"] == main
    assert_fsck_clean(home.repo("yuko"))


def test_restore_refuses_over_commits_the_backup_lacks(cli: Cli, tmp_path: Path) -> None:
    base = tmp_path / "backups"
    home = populated(cli, base)
    backup.flush(30)
    ahead = land_note(home, 8)  # landed after the last push
    before = refs(home.repo("yuko"))
    refused = cli("restore", "--from", str(base))
    assert refused.code == 1
    [line] = refused.stderr.splitlines()
    assert line.startswith("impyard: error: refusing to restore imp 'yuko' over ")
    assert f"main {ahead.commit[:12] if ahead.commit else ''} is not an ancestor" in line
    assert refs(home.repo("yuko")) == before  # nothing changed, kai included
    assert "brought up" not in refused.stdout


def test_restore_names_each_ref_the_backup_lacks(cli: Cli, tmp_path: Path) -> None:
    base = tmp_path / "backups"
    home = populated(cli, base)
    backup.flush(30)
    set_remotes(home, [])  # nothing more is pushed
    candidate = reject_note(home, 9)
    repo = open_repo(home, "yuko")
    quarantine(repo, run_id(5), main_commit(repo), Change(), "killed again")  # re-pointed
    refused = cli("restore", "--from", str(base), "--imp", "yuko")
    assert refused.code == 1
    [line] = refused.stderr.splitlines()
    assert f"{candidate} (" in line and "is not in the backup" in line
    assert f"refs/quarantine/{run_id(5)} (" in line and "is at another commit there" in line
    assert "main " not in line.split("lacks: ", 1)[1]  # main itself is fine


@pytest.mark.parametrize("source", ["url", "missing"])
def test_restore_from_nothing_fails_with_one_line(cli: Cli, tmp_path: Path, source: str) -> None:
    assert cli("init").code == 0
    where = str(tmp_path / "nowhere") if source == "missing" else "git://127.0.0.1:9/"
    result = cli("restore", "--from", where)
    assert result.code == 1
    [line] = result.stderr.splitlines()
    assert line.startswith("impyard: error: ")
    if source == "url":
        assert "--imp" in line  # a URL cannot be listed


@pytest.mark.parametrize("line_bytes", [MAX_COMMIT_LINE, MAX_COMMIT_LINE + 1, 3 * 1024 * 1024])
def test_restore_refuses_a_main_whose_message_holds_a_line_the_lane_never_writes(
    cli: Cli, tmp_path: Path, line_bytes: int
) -> None:
    """The lane's longest line is a Source-Receipt trailer under 256 KiB; a main whose
    message is one longer line is refused, naming the commit and the bound, and the
    refusal itself stays short. A line at the bound is restored."""
    base = tmp_path / "backups"
    repo = pygit2.init_repository(str(base / "yuko.git"), bare=True, initial_head="main")
    message = b"Source-Receipt: " + b"x" * (line_bytes - 16) + b"\n"
    commit = raw_commit(repo, knowledge_tree(repo, []), message=message)
    repo.references.create("refs/heads/main", commit)
    assert cli("init").code == 0

    result = cli("restore", "--from", str(base))
    if line_bytes <= MAX_COMMIT_LINE:
        assert result.code == 0, result.stderr
        return
    assert result.code == 1
    assert len(result.stderr) < 2_000, result.stderr[:2_000]
    assert f"yuko main: long-line: commit {commit}: a line of {line_bytes:,} bytes" in (
        result.stderr
    )
    assert f"over the {MAX_COMMIT_LINE:,}" in result.stderr
    assert json.loads(cli("imp", "list", "--json").stdout) == []


def test_a_refusal_naming_a_long_nested_entry_stays_short(cli: Cli, tmp_path: Path) -> None:
    """Each problem's path and message is cut to its bound, saying how much: here a
    zero-padded mode 20 levels of 10,000-character names down (a 200,000-character path)."""
    base = tmp_path / "backups"
    repo = pygit2.init_repository(str(base / "yuko.git"), bare=True, initial_head="main")
    name = b"n" * 10_000
    tree = raw_tree(repo, [(b"040000", name, raw_tree(repo, []))])  # zero-padded mode
    for _ in range(19):
        tree = raw_tree(repo, [(b"40000", name, tree)])
    main = raw_commit(repo, knowledge_tree(repo, [(b"40000", name, tree)]))
    repo.references.create("refs/heads/main", main)
    assert cli("init").code == 0

    result = cli("restore", "--from", str(base))
    assert result.code == 1
    [problem] = [line for line in result.stderr.splitlines() if "zeroPaddedFilemode" in line]
    assert len(problem) < 2 * MESSAGE_CHARS + 100, len(problem)
    assert problem.count(" characters]") == 2  # its path, and its message


@pytest.mark.parametrize(
    ("transport", "form"),
    [("path", "blob"), ("file", "delta"), ("git", "blob"), ("git", "delta")],
)
def test_a_bomb_is_refused_before_it_is_inflated(
    cli: Cli, tmp_path: Path, transport: str, form: str
) -> None:
    """A backup of ~1 MB whose one blob inflates to 1 GiB (deflated whole, or a delta that
    copies 64 KiB 16,384 times) is refused by the sizes it declares, the restoring process
    staying far below the blob's size."""
    assert cli("init").code == 0
    home = Home(cli.home)
    base = tmp_path / "backups"
    bomb = bomb_backup(base, "yuko", GIB, delta=form == "delta")
    limits = KnowledgeLimits.of(policy_for_run(home, "yuko", strict=False)[0].knowledge)
    bound = GateLimits.of(limits).max_kept_file_bytes  # the largest file any kept tree holds
    env = {**os.environ, **GIT_ENV}
    env.pop("IMPYARD_HOME", None)
    with contextlib.ExitStack() as stack:
        where = {"path": str(base), "file": f"file://{base}"}.get(transport)
        if where is None:
            where = stack.enter_context(git_daemon(base))
        argv = [sys.executable, "-m", "impyard", "--home", str(home.root), "restore"]
        code, stderr, peak = peak_rss([*argv, "--from", where, "--imp", "yuko"], env, tmp_path)
    assert code == 1
    assert peak < 300 << 20, f"peak resident set {peak >> 20} MiB"
    header, line, *rest = stderr.splitlines()
    assert header.startswith("impyard: error: refusing to restore: ") and not rest
    assert "nothing was installed" in header
    # The object (by id, or by its place in the pack a server sent), its size, the limit.
    assert line.startswith("  yuko object " if transport != "git" else "  yuko pack entry ")
    assert transport == "git" or f"object {bomb[:12]}" in line
    assert f"{GIB} bytes, over {bound}" in line
    assert not home.imp_dir("yuko").exists() and list(home.knowledge_dir.iterdir()) == []


@pytest.mark.parametrize("odd", ["alternates", "fifo", "loose"])
def test_a_local_backup_libgit2_would_read_unbounded_is_refused(
    cli: Cli, tmp_path: Path, odd: str
) -> None:
    """What the headers cannot vouch for: objects borrowed from elsewhere, an object file
    libgit2 would wait on (a fifo), a loose object file bigger than any object may be
    (libgit2 reads a loose file whole)."""
    base = tmp_path / "backups"
    home = populated(cli, base)
    backup.flush(30)
    shutil.rmtree(home.root)
    objects = base / "kai.git" / "objects"
    if odd == "alternates":
        (objects / "info").mkdir(exist_ok=True)
        (objects / "info" / "alternates").write_text(f"{base / 'yuko.git' / 'objects'}\n")
    elif odd == "fifo":
        (objects / "pack" / f"pack-{'0' * 40}.pack").write_bytes(b"")
        os.mkfifo(objects / "pack" / f"pack-{'0' * 40}.idx")
    else:
        (objects / "ab").mkdir(exist_ok=True)
        with (objects / "ab" / ("c" * 38)).open("wb") as loose:
            loose.write(zlib.compress(b"blob 10\x00" + b"0123456789"))
            loose.truncate(200 << 20)  # sparse: nothing written
    result = cli("restore", "--from", str(base), "--imp", "kai")
    assert result.code == 1
    text = {
        "alternates": "borrows objects from another repository (objects/info/alternates)",
        "fifo": f"kai pack/pack-{'0' * 40}.idx: object-too-large: not a regular file",
        "loose": f"kai object ab{'c' * 10}: object-too-large: a loose object file of ",
    }[odd]
    assert text in result.stderr
    assert not home.imp_dir("kai").exists()
