"""The canonical repo: creation, lookup, published origin, tree rebuilding and size cache."""

from __future__ import annotations

import json
from pathlib import Path

import pygit2
import pytest

from impyard.common.errors import KnowledgeError, NotFoundError, UsageError
from impyard.dataroot import init_home
from impyard.home import Home
from impyard.knowledge.change import FileState
from impyard.knowledge.imps import ImpSettings, create_imp, list_imps, open_repo, read_imp_settings
from impyard.knowledge.integration.origin import publish_origin
from impyard.knowledge.store.repo import main_commit
from impyard.knowledge.store.trees import PathConflict, build_tree
from impyard.knowledge.validation.sizes import size_cache_path, tree_bytes, tree_bytes_full
from tests.helpers.git import git
from tests.helpers.repo import assert_fsck_clean, make_imp, tree_paths


def test_create_imp_builds_a_bare_repo_with_the_initial_layout(tmp_path: Path) -> None:
    home, repo = make_imp(tmp_path)
    assert repo.is_bare
    assert home.repo("yuko").is_dir()
    assert tree_paths(repo) == {"README.md", "records/README.md", "organization/README.md"}
    head = repo[main_commit(repo)]
    assert head.author.name == "impyard" and head.author.email == "impyard@localhost"
    assert head.committer.email == "impyard@localhost"
    assert head.parents == []
    assert git("-C", home.repo("yuko"), "symbolic-ref", "HEAD").stdout.strip() == "refs/heads/main"
    assert git("-C", home.repo("yuko"), "for-each-ref", "--format=%(refname)").stdout.split() == [
        "refs/heads/main"
    ]
    readme = repo[main_commit(repo)].tree["README.md"].data.decode()
    assert "records/<topic>/<slug>--<namespace>_<number>.md" in readme
    assert not list((home.repo("yuko") / "hooks").iterdir())
    assert_fsck_clean(home.repo("yuko"))


def test_origin_is_a_minimal_mirror_of_main(tmp_path: Path) -> None:
    home, repo = make_imp(tmp_path)
    origin = home.origin("yuko")
    assert git("-C", origin, "rev-parse", "main").stdout.strip() == main_commit(repo)
    assert git("-C", origin, "for-each-ref", "--format=%(refname)").stdout.split() == [
        "refs/heads/main"
    ]
    assert not list((origin / "hooks").iterdir())
    config = (origin / "config").read_text()
    assert "[remote" not in config and "hooksPath" not in config
    assert_fsck_clean(origin)


def test_publish_origin_copies_new_commits_and_drops_other_refs(tmp_path: Path) -> None:
    home, repo = make_imp(tmp_path)
    blob = repo.create_blob(b"x\n")
    head = repo[main_commit(repo)]
    tree = build_tree(repo, head.tree, {"records/t/a.md": FileState(str(blob), 2, False)}, ())
    sig = pygit2.Signature("t", "t@t")
    new = repo.create_commit("refs/heads/main", sig, sig, "m\n", tree, [head.id])
    repo.references.create("refs/candidates/x", new)
    origin = pygit2.Repository(str(home.origin("yuko")))
    origin.references.create("refs/stray", origin.head.target)
    assert publish_origin(home, "yuko") == str(new)
    assert git("-C", home.origin("yuko"), "for-each-ref", "--format=%(refname)").stdout.split() == [
        "refs/heads/main"
    ]
    assert git("-C", home.origin("yuko"), "show", "main:records/t/a.md").stdout == "x\n"
    assert_fsck_clean(home.origin("yuko"))
    clone = tmp_path / "clone"
    git("clone", "-q", home.origin("yuko"), clone)
    assert (clone / "records/t/a.md").read_text() == "x\n"


@pytest.mark.parametrize("name", ["Yuko", "-x", "a b", "../x", "", "a" * 33, ".hidden"])
def test_create_imp_refuses_invalid_names(tmp_path: Path, name: str) -> None:
    home = Home(tmp_path / "home")
    init_home(home)
    with pytest.raises(UsageError, match="invalid imp name"):
        create_imp(home, name)
    assert list_imps(home) == []


def test_create_imp_refuses_an_existing_imp_and_leaves_it_intact(tmp_path: Path) -> None:
    home, repo = make_imp(tmp_path)
    before = main_commit(repo)
    with pytest.raises(UsageError, match="already exists"):
        create_imp(home, "yuko")
    assert main_commit(open_repo(home, "yuko")) == before
    assert [p.name for p in home.knowledge_dir.iterdir()] == ["yuko"]  # no staging left


def test_create_imp_needs_an_initialized_home(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="impyard init"):
        create_imp(Home(tmp_path / "nowhere"), "yuko")


def test_list_imps_ignores_staging_and_stray_entries(tmp_path: Path) -> None:
    home, _ = make_imp(tmp_path)
    create_imp(home, "abe")
    (home.knowledge_dir / ".creating-zed-1234").mkdir()
    (home.knowledge_dir / "notanimp").mkdir()
    assert list_imps(home) == ["abe", "yuko"]


def test_open_repo_names_the_missing_imp(tmp_path: Path) -> None:
    home, _ = make_imp(tmp_path)
    with pytest.raises(NotFoundError, match="'bob'"):
        open_repo(home, "bob")


def test_imp_settings_round_trip(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    init_home(home)
    create_imp(home, "yuko", ImpSettings(image="img:1", command="echo hi"))
    create_imp(home, "abe")
    assert read_imp_settings(home, "yuko") == ImpSettings(image="img:1", command="echo hi")
    assert read_imp_settings(home, "abe") == ImpSettings()
    (home.imp_dir("abe") / "imp.json").write_text("[1]")
    with pytest.raises(KnowledgeError, match="not a JSON object"):
        read_imp_settings(home, "abe")


def test_build_tree_rebuilds_changed_paths_and_drops_empty_dirs(tmp_path: Path) -> None:
    _, repo = make_imp(tmp_path)
    head = repo[main_commit(repo)]
    blob = str(repo.create_blob(b"a"))
    tree = repo[build_tree(repo, head.tree, {"organization/x/y.md": FileState(blob, 1, False)}, ())]
    assert tree["records"].id == head.tree["records"].id  # untouched subtree reused
    tree2 = repo[build_tree(repo, tree, {}, {"organization/x/y.md"})]
    assert tree2.id == head.tree.id
    with pytest.raises(PathConflict) as exc:
        build_tree(repo, head.tree, {"README.md/x": FileState(blob, 1, False)}, ())
    assert exc.value.path == "README.md"


def test_tree_bytes_cache_matches_a_full_walk_and_survives_corruption(tmp_path: Path) -> None:
    _, repo = make_imp(tmp_path)
    head = main_commit(repo)
    full = tree_bytes_full(repo, repo[head].tree)
    assert tree_bytes(repo, head) == full
    size_cache_path(repo).write_text("{torn")
    assert tree_bytes(repo, head) == full
    assert json.loads(size_cache_path(repo).read_text()) == {head: full}
