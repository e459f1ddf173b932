"""The gate every tree from outside the lane passes: a restore refuses a backup whose trees
the lane would never write (one line a problem, nothing created, nothing written outside
the data root), a checkout refuses an unsafe object database before writing anything, and
an imp whose main went bad is named by ``knowledge check`` and refused before any run."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pygit2
import pytest

from impyard.home import Home
from impyard.knowledge.checkouts.checkout import prepare_checkout
from impyard.knowledge.checkouts.image_archive import TreeShape
from impyard.knowledge.checkouts.layers import ensure_layer
from impyard.knowledge.checkouts.treefs import UnsafeTreeError
from impyard.knowledge.imps import open_repo
from impyard.knowledge.store.repo import main_commit
from tests.helpers.checkout import OWNER
from tests.helpers.cli import Cli
from tests.helpers.git import git
from tests.helpers.hostile_trees import (
    HOSTILE,
    blob,
    hostile_remote,
    knowledge_tree,
    owner_commit,
    raw_commit,
    raw_tree,
)
from tests.helpers.repo import RUN, assert_fsck_clean, integrate_change

CASES = sorted(HOSTILE)


def _problem_lines(stderr: str) -> list[str]:
    """The refusal's lines after its first (each one problem, indented)."""
    first, *rest = stderr.splitlines()
    assert first.startswith("impyard: error: refusing to restore: "), stderr
    assert all(line.startswith("  yuko ") for line in rest), stderr
    return [line.strip() for line in rest]


@pytest.mark.parametrize("case", CASES)
def test_restore_refuses_a_crafted_main_and_creates_nothing(
    cli: Cli, tmp_path: Path, case: str
) -> None:
    outside = tmp_path / "outside" / "pwned"
    base = tmp_path / "backups"
    remote = hostile_remote(base, case, outside)
    expected = HOSTILE[case]
    if expected.fsck_refuses:  # the crafted remote is what git itself calls broken
        assert git("-C", remote.path, "fsck", "--strict", check=False).returncode != 0

    result = cli("restore", "--from", str(base))  # no data root yet: restore would make one
    assert result.code == 1, result.stdout + result.stderr
    lines = _problem_lines(result.stderr)
    assert any(
        line.startswith(f"yuko main:{expected.path}") and f": {expected.rule}: " in line
        for line in lines
    ), lines
    assert not cli.home.exists()  # the data root it made for the restore is gone again
    assert not outside.parent.exists()

    assert cli("init").code == 0  # into an existing data root: still nothing
    again = cli("restore", "--from", str(base), "--json")
    assert again.code == 1
    document = json.loads(again.stdout)
    assert document["ok"] is False
    assert {(p["imp"], p["where"], p["rule"]) for p in document["problems"]} >= {
        ("yuko", "main", expected.rule)
    }
    assert os.listdir(Home(cli.home).knowledge_dir) == []
    assert json.loads(cli("imp", "list", "--json").stdout) == []
    assert not outside.parent.exists()


def test_restore_checks_history_and_every_ref_not_only_mains_tip(cli: Cli, tmp_path: Path) -> None:
    """A bad tree a parent commit or a candidate holds is refused too, as fsck refuses it;
    and a commit header git refuses (a bad author line) is named."""
    base = tmp_path / "backups"
    repo = hostile_remote(base, "dotdot", tmp_path / "outside")
    bad = repo.references["refs/heads/main"].target
    clean = knowledge_tree(repo, [])
    repo.references["refs/heads/main"].set_target(raw_commit(repo, clean, [bad]))
    candidate = knowledge_tree(repo, [(b"40000", b".git", raw_tree(repo, []))])
    run = "run-20260711T120000Z-00000000ff"
    repo.references.create(f"refs/candidates/{run}", raw_commit(repo, candidate, [bad]))
    forged = raw_commit(repo, clean, author=b"Mallory <m@example> 0100 +0000")
    repo.references.create(f"refs/quarantine/{run}", forged)
    assert git("-C", repo.path, "fsck", "--strict", check=False).returncode != 0

    result = cli("restore", "--from", str(base))
    assert result.code == 1
    lines = _problem_lines(result.stderr)
    assert f"yuko {str(bad)[:12]}:records/..: path-escape: path segment '..' is not allowed" in (
        lines
    )
    assert any(
        line.startswith(f"yuko refs/candidates/{run}:records/.git: git-metadata") for line in lines
    )
    assert any(
        line.startswith(f"yuko refs/quarantine/{run}: bad-object: ") and "author" in line
        for line in lines
    ), lines


@pytest.mark.parametrize("case", ["traversal", "dotdot", "deep", "symlink"])
def test_a_checkout_refuses_an_unsafe_object_database_before_writing(
    tmp_path: Path, cli: Cli, case: str
) -> None:
    """Defence in depth: the object database is input too. Neither the copy checkout nor
    an overlay layer writes anything of a tree holding an unsafe entry."""
    outside = tmp_path / "outside" / "pwned"
    assert cli("init").code == 0
    assert cli("imp", "create", "yuko").code == 0
    home = Home(cli.home)
    repo = open_repo(home, "yuko")
    base = str(owner_commit(repo, case, outside))

    with pytest.raises(UnsafeTreeError) as refused:
        prepare_checkout(home, "yuko", RUN, base, "copy", OWNER)
    assert refused.value.problems[0][1] == HOSTILE[case].rule
    assert "nothing written" in str(refused.value)
    assert list(home.run_checkout(RUN).iterdir()) == []
    with pytest.raises(UnsafeTreeError):
        ensure_layer(home, "yuko", base, OWNER)
    assert os.listdir(home.layers("yuko")) == [".lock"]  # no layer, no half-built one
    assert not outside.parent.exists()


def test_knowledge_check_says_clean_for_a_lane_written_imp(cli: Cli) -> None:
    assert cli("init").code == 0
    assert cli("imp", "create", "yuko").code == 0
    checked = cli("knowledge", "check", "yuko")
    assert checked.code == 0, checked.stdout + checked.stderr
    assert checked.stdout == "yuko: clean\n"
    as_json = json.loads(cli("knowledge", "check", "yuko", "--json").stdout)
    assert as_json == {"imp": "yuko", "clean": True, "problems": [], "omitted": 0}
    assert cli("knowledge", "yuko").stdout.strip().endswith("repo.git")  # the path, as before


@pytest.mark.parametrize("case", ["dotdot", "deep", "symlink", "traversal", "dot-git"])
def test_an_imp_whose_main_went_bad_is_named_and_never_run(
    cli: Cli, tmp_path: Path, case: str
) -> None:
    """An owner's commit left main unsafe: `knowledge check` names the entry, and a run is
    refused in one line before anything of it exists (not exit 70, not a quarantine)."""
    assert cli("init").code == 0
    assert cli("imp", "create", "yuko").code == 0
    home = Home(cli.home)
    repo = open_repo(home, "yuko")
    bad = str(owner_commit(repo, case, tmp_path / "outside" / "pwned"))
    expected = HOSTILE[case]

    checked = cli("knowledge", "check", "yuko")
    assert checked.code == 1
    assert any(
        line.startswith(f"main:{expected.path}") and f": {expected.rule}: " in line
        for line in checked.stdout.splitlines()
    ), checked.stdout
    document = json.loads(cli("knowledge", "check", "yuko", "--json").stdout)
    assert document["clean"] is False
    assert (document["problems"][0]["where"], document["problems"][0]["rule"]) == (
        "main",
        expected.rule,
    )

    as_command = Cli(cli.home, in_process=False)  # the console command, its real exit code
    result = as_command("run", "yuko", "--prompt", "p", "--command", "true", timeout=60)
    assert result.code == 1, result.stderr
    [line] = result.stderr.splitlines()
    assert line.startswith(f"impyard: error: imp 'yuko': main {bad[:12]} holds what no checkout")
    assert f": {expected.rule}: " in line
    assert line.endswith("see `impyard knowledge check yuko`")
    assert os.listdir(home.runs_dir) == []
    assert [r for r in open_repo(home, "yuko").references if "quarantine" in r] == []
    assert not (tmp_path / "outside").exists()


def test_a_run_check_reuses_what_it_found_and_still_sees_a_new_bad_tree(
    cli: Cli, tmp_path: Path
) -> None:
    """The base check remembers clean trees; a later owner's commit is still refused, and a
    torn record of what was checked is only a slower check."""
    from impyard.knowledge.change import KnowledgeLimits
    from impyard.knowledge.gates.maincheck import UnsafeMainError, check_base
    from tests.helpers.backup import land_note

    assert cli("init").code == 0
    assert cli("imp", "create", "yuko").code == 0
    home = Home(cli.home)
    limits = KnowledgeLimits()
    repo = open_repo(home, "yuko")
    check_base(home, "yuko", main_commit(repo), limits)
    assert home.checked_trees("yuko").is_file()
    land_note(home, 1)
    clean = main_commit(open_repo(home, "yuko"))
    check_base(home, "yuko", clean, limits)
    bad = str(owner_commit(open_repo(home, "yuko"), "symlink", tmp_path / "x"))
    with pytest.raises(UnsafeMainError, match="symlink"):
        check_base(home, "yuko", bad, limits)
    home.checked_trees("yuko").write_bytes(b"IMPYCT1\n" + b"\0" * 200)  # torn
    with pytest.raises(UnsafeMainError, match="symlink"):
        check_base(home, "yuko", bad, limits)
    check_base(home, "yuko", clean, limits)  # the clean one again: found clean again
    with pytest.raises(UnsafeMainError, match="repo-too-large"):
        check_base(home, "yuko", clean, KnowledgeLimits(max_repo_bytes=10))


def test_the_gate_agrees_with_git_fsck_on_malformed_trees(cli: Cli, tmp_path: Path) -> None:
    """Entries out of order, a repeated entry and a zero-padded mode: libgit2 reads all three,
    git fsck --strict refuses them, and so does restore."""
    base = tmp_path / "backups"
    for imp, entries, ordered in (
        ("unsorted", [(b"100644", b"b.md", b""), (b"100644", b"a.md", b"")], False),
        ("twice", [(b"100644", b"a.md", b""), (b"100644", b"a.md", b"")], False),
        ("padded", [(b"0100644", b"a.md", b"")], True),
    ):
        repo = pygit2.init_repository(str(base / f"{imp}.git"), bare=True, initial_head="main")
        one = blob(repo)
        records = raw_tree(repo, [(m, n, one) for m, n, _ in entries], ordered=ordered)
        readme = blob(repo, b"# k\n")
        root = raw_tree(repo, [(b"100644", b"README.md", readme), (b"40000", b"records", records)])
        repo.references.create("refs/heads/main", raw_commit(repo, root))
        assert git("-C", repo.path, "fsck", "--strict", check=False).returncode != 0, imp
        result = cli("restore", "--from", str(base), "--imp", imp)
        assert result.code == 1
        assert f"{imp} main:records: bad-object: " in result.stderr, result.stderr


def test_a_restore_the_gate_passes_is_fsck_clean(cli: Cli, tmp_path: Path) -> None:
    base = tmp_path / "backups"
    repo = pygit2.init_repository(str(base / "yuko.git"), bare=True, initial_head="main")
    note = blob(repo, b"---\nid: n_000000000001_1\n---\n")
    topic = raw_tree(repo, [(b"100644", b"acme--n_000000000001_1.md", note)])
    tree = knowledge_tree(repo, [(b"40000", b"vendors", topic)])
    repo.references.create("refs/heads/main", raw_commit(repo, tree))
    result = cli("restore", "--from", str(base))
    assert result.code == 0, result.stderr
    assert_fsck_clean(Home(cli.home).repo("yuko"))
    assert cli("knowledge", "check", "yuko").code == 0


def test_a_tree_of_shared_subtrees_is_refused_by_what_it_expands_to(
    cli: Cli, tmp_path: Path
) -> None:
    """Twenty-one levels of two names for one subtree: 63 objects, 2,097,152 paths. The
    gate counts paths through shared trees once per object, and refuses it at once."""
    base = tmp_path / "backups"
    repo = pygit2.init_repository(str(base / "yuko.git"), bare=True, initial_head="main")
    tree = raw_tree(repo, [(b"100644", b"leaf.md", blob(repo))])
    for _ in range(21):
        tree = raw_tree(repo, [(b"40000", b"a", tree), (b"40000", b"b", tree)])
    root = knowledge_tree(repo, [(b"40000", b"wide", tree)])
    repo.references.create("refs/heads/main", raw_commit(repo, root))
    result = cli("restore", "--from", str(base))
    assert result.code == 1
    # 2**21 leaves and the three README.md files
    assert "yuko main: repo-too-large: 2097155 files, over 1000000" in result.stderr
    assert "too-deep" not in result.stderr  # 23 levels are within bounds


def test_the_plain_name_shortcut_decides_as_the_full_rules_do(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from impyard.knowledge.validation import pathnames

    full = pathnames.name_rules
    names = st.text(alphabet="aZ09_-.~ :$<", min_size=1, max_size=8) | st.sampled_from(
        ["con", "CON.txt", "lpt1.md", "AGENTS.md", "claude.md", "github", "a.", "x.md"]
    )

    @settings(max_examples=2000, deadline=None)
    @given(names, st.booleans())
    def agree(name: str, directory: bool) -> None:
        shortcut = full(name, directory=directory)
        with monkeypatch.context() as m:
            m.setattr(pathnames, "_PLAIN", re.compile("(?!)"))  # never plain: every rule runs
            assert full(name, directory=directory) == shortcut

    agree()


def test_what_the_lane_keeps_off_main_passes_the_gate(cli: Cli, tmp_path: Path) -> None:
    """A candidate may hold what main may not (an executable file, a file over
    max_file_chars kept for a retry under a raised limit): knowledge check and a restore
    of its backup take it as the lane kept it."""
    from impyard import backup
    from impyard.knowledge.change import KnowledgeLimits
    from tests.helpers.backup import set_remotes
    from tests.helpers.policy import edit_org
    from tests.helpers.repo import NS, change_of, note_path, note_text

    assert cli("init").code == 0
    assert cli("imp", "create", "yuko").code == 0
    home = Home(cli.home)
    repo = open_repo(home, "yuko")
    base = main_commit(repo)
    big = note_text(f"{NS}_2", body="x" * 5_000).encode()
    change = change_of(
        repo, {note_path(NS, 1): (note_text(f"{NS}_1").encode(), True), note_path(NS, 2): big}
    )
    limits = KnowledgeLimits(max_file_chars=1_000)
    result = integrate_change(home, change, base, limits=limits)
    assert result.candidate_ref is not None
    assert {v.rule for v in result.violations} >= {"executable", "file-too-large"}
    assert cli("knowledge", "check", "yuko").code == 0

    remote = tmp_path / "backups"
    set_remotes(home, [str(remote)])
    assert cli("backup", "now").code == 0
    backup.flush(30)
    elsewhere = Cli(tmp_path / "elsewhere")  # as strict as the data root it came from
    assert elsewhere("init").code == 0
    edit_org(elsewhere.home, "max_file_chars = 200000", "max_file_chars = 1000")
    assert elsewhere("deploy").code == 0
    restored = elsewhere("restore", "--from", str(remote))
    assert restored.code == 0, restored.stderr
    assert result.candidate_ref in open_repo(Home(elsewhere.home), "yuko").references
    assert_fsck_clean(Home(elsewhere.home).repo("yuko"))


def test_a_base_check_leaves_the_size_the_lane_checks_against(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run's base that nothing had sized is sized by its check, not by a second walk of
    every record at the run's checkpoint."""
    from impyard.knowledge.change import KnowledgeLimits
    from impyard.knowledge.gates.maincheck import check_base
    from impyard.knowledge.validation import sizes
    from tests.helpers.backup import land_note

    assert cli("init").code == 0
    assert cli("imp", "create", "yuko").code == 0
    home = Home(cli.home)
    land_note(home, 1)
    repo = open_repo(home, "yuko")
    sizes.size_cache_path(repo).unlink(missing_ok=True)  # as after a restore or import
    base = main_commit(repo)
    walked = sizes.tree_bytes_full(repo, repo[base].peel(pygit2.Tree))

    def no_walk(*_: object) -> int:
        raise AssertionError("the base was walked again to size it")

    check_base(home, "yuko", base, KnowledgeLimits())
    monkeypatch.setattr(sizes, "tree_bytes_full", no_walk)
    assert sizes.tree_bytes(open_repo(home, "yuko"), base) == walked


def test_a_run_that_lands_leaves_the_new_main_checked_for_the_next_run(tmp_path: Path) -> None:
    """The landing's ending checks the new main, so the next run's admission reads the
    answer (no tree walked, no git library loaded) and its box starts sooner."""
    from impyard.knowledge.gates.maincheck import walks_main
    from impyard.runs.drive import endings
    from tests.helpers.repo import make_imp, note
    from tests.helpers.runs import running

    home, repo = make_imp(tmp_path)
    run, root = running(home)
    assert walks_main(home, "yuko", main_commit(repo))  # never checked yet
    path, data = note()
    (root / path).parent.mkdir(parents=True, exist_ok=True)
    (root / path).write_bytes(data)
    endings.checkpoint(run)  # type: ignore[arg-type]
    assert run.finished["checkpoint"] == "integrated", run.finished
    landed = main_commit(repo)
    assert landed == run.finished["produced_commit"]
    assert not walks_main(home, "yuko", landed)


def test_a_base_check_that_read_every_tree_gives_the_trees_shape(cli: Cli) -> None:
    """What a layer's image built beside the check is told: how many files are executable
    and how wide the widest directory is, when the check read every tree of the base;
    nothing when it relied on trees it found clean before or read only its record of the
    last base."""
    from impyard.knowledge.change import KnowledgeLimits
    from impyard.knowledge.gates.maincheck import check_base
    from tests.helpers.backup import land_note

    assert cli("init").code == 0
    assert cli("imp", "create", "yuko").code == 0
    home = Home(cli.home)
    land_note(home, 1)
    limits = KnowledgeLimits()
    repo = open_repo(home, "yuko")
    landed = main_commit(repo)
    home.checked_trees("yuko").unlink(missing_ok=True)
    widest = _widest(repo[landed].peel(pygit2.Tree))
    assert check_base(home, "yuko", landed, limits) == TreeShape(0, widest)
    assert check_base(home, "yuko", landed, limits) is None  # its record read, no tree
    tree = repo.TreeBuilder(repo[landed].peel(pygit2.Tree))
    tree.insert("tool.sh", repo.create_blob(b"#!/bin/sh\n"), pygit2.enums.FileMode.BLOB_EXECUTABLE)
    sig = pygit2.Signature("owner", "owner@example.com")
    with_tool = str(repo.create_commit(None, sig, sig, "a tool", tree.write(), [repo[landed].id]))
    assert check_base(home, "yuko", with_tool, limits) is None  # records/ was found clean before
    home.checked_trees("yuko").unlink()
    shape = TreeShape(1, _widest(repo[with_tool].peel(pygit2.Tree)))
    assert check_base(home, "yuko", with_tool, limits) == shape


def _widest(tree: pygit2.Tree) -> int:
    """The entries of the largest directory of ``tree``."""
    below = [_widest(entry) for entry in tree if isinstance(entry, pygit2.Tree)]
    return max([len(tree), *below])
