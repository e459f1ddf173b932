"""Names that would break a clone on Windows or macOS never land (like git's protectNTFS/HFS)."""

from __future__ import annotations

from pathlib import Path

import pygit2
import pytest

from impyard.home import Home
from impyard.knowledge.change import RULES, Change, KnowledgeLimits, Mode
from impyard.knowledge.imps import open_repo
from impyard.knowledge.store.repo import main_commit
from impyard.knowledge.store.trees import build_tree
from impyard.knowledge.validation.validate import is_storable_path, path_violations, validate
from tests.helpers import repo as knowledge
from tests.helpers.repo import NS

LIMITS = KnowledgeLimits()
RECORD = knowledge.note_text(f"{NS}_1").encode()


@pytest.fixture
def imp(tmp_path: Path) -> tuple[Home, pygit2.Repository]:
    return knowledge.make_imp(tmp_path)


def commit_on_main(repo: pygit2.Repository, files: dict[str, bytes]) -> str:
    """Put files on main directly (as history from before these rules would have)."""
    head = main_commit(repo)
    change = knowledge.change_of(repo, files)
    tree = build_tree(repo, repo[head].peel(pygit2.Tree), change.written, set())
    who = pygit2.Signature("history", "history@example.com")
    return str(repo.create_commit("refs/heads/main", who, who, "direct\n", tree, [repo[head].id]))


def check(
    repo: pygit2.Repository, change: Change, mode: Mode = "reorganize"
) -> set[tuple[str, str]]:
    found = validate(repo, main_commit(repo), change, namespace=NS, mode=mode, limits=LIMITS)
    assert all(v.rule in RULES and v.message for v in found)
    return {(v.path, v.rule) for v in found}


@pytest.mark.parametrize(
    "path",
    [
        "organization/con.md",
        "organization/CON",
        "organization/Aux.txt",
        "organization/nul.tar.gz",
        "organization/nul .txt",
        "organization/com1.md",
        "organization/COM9",
        "organization/lpt1.md",
        "organization/Lpt9.txt",
        "organization/com\u00b9.md",
        "organization/prn/index.md",
        "organization/conout$.md",
        "organization/a<b.md",
        "organization/a>b.md",
        "organization/a:b.md",
        'organization/a"b.md',
        "organization/a|b.md",
        "organization/a?b.md",
        "organization/a*b.md",
        "organization/topics./index.md",
        "organization/topics /index.md",
        "organization/index.md.",
        "organization/index.md ",
        f"records/con/acme--{NS}_1.md",
        f"records/lpt3/acme--{NS}_1.md",
    ],
)
def test_windows_unportable_names_are_refused(path: str) -> None:
    rules = {v.rule for v in path_violations(path)}
    assert "unportable-name" in rules
    assert not is_storable_path(path)


@pytest.mark.parametrize(
    "path",
    [
        "organization/console.md",
        "organization/com10.md",
        "organization/lpt.md",
        "organization/connect/auxiliary.md",
        "organization/nul-results.md",
        "organization/a.b.md",
        "organization/topics/ai-agents.md",
        knowledge.note_path(),
    ],
)
def test_ordinary_names_are_portable(path: str) -> None:
    assert path_violations(path) == []


def test_an_unportable_record_topic_is_refused_in_append(
    imp: tuple[Home, pygit2.Repository],
) -> None:
    _, repo = imp
    path = f"records/aux/acme--{NS}_1.md"
    assert check(repo, knowledge.change_of(repo, {path: RECORD}), mode="append") == {
        (path, "unportable-name")
    }


def test_a_case_variant_of_an_existing_name_is_refused(
    imp: tuple[Home, pygit2.Repository],
) -> None:
    _, repo = imp
    found = check(repo, knowledge.change_of(repo, {"organization/readme.md": b"# index\n"}))
    assert found == {("organization/readme.md", "name-clash")}


def test_a_unicode_form_variant_of_an_existing_name_is_refused(
    imp: tuple[Home, pygit2.Repository],
) -> None:
    _, repo = imp
    commit_on_main(repo, {"organization/caf\u00e9.md": b"nfc\n"})
    nfd = "organization/cafe\u0301.md"
    assert check(repo, knowledge.change_of(repo, {nfd: b"nfd\n"})) == {(nfd, "name-clash")}
    joiner = "organization/ca\u200cf\u00e9.md"
    assert check(repo, knowledge.change_of(repo, {joiner: b"x\n"})) == {(joiner, "name-clash")}
    folded = "organization/CAF\u00c9.md"
    assert check(repo, knowledge.change_of(repo, {folded: b"x\n"})) == {(folded, "name-clash")}


def test_a_trailing_dot_variant_is_unportable_and_a_clash(
    imp: tuple[Home, pygit2.Repository],
) -> None:
    _, repo = imp
    path = "organization/README.md."
    assert check(repo, knowledge.change_of(repo, {path: b"x\n"})) == {
        (path, "unportable-name"),
        (path, "name-clash"),
    }


def test_two_new_names_in_one_change_clash_with_each_other(
    imp: tuple[Home, pygit2.Repository],
) -> None:
    _, repo = imp
    change = knowledge.change_of(
        repo, {"organization/Index.md": b"a\n", "organization/index.md": b"b\n"}
    )
    found = validate(
        repo, main_commit(repo), change, namespace=NS, mode="reorganize", limits=LIMITS
    )
    assert {(v.path, v.rule) for v in found} == {
        ("organization/Index.md", "name-clash"),
        ("organization/index.md", "name-clash"),
    }
    assert all("organization/" in v.message for v in found)


def test_a_directory_clash_is_named_once(imp: tuple[Home, pygit2.Repository]) -> None:
    _, repo = imp
    commit_on_main(repo, {"organization/topics/a.md": b"a\n"})
    change = knowledge.change_of(
        repo, {"organization/Topics/b.md": b"b\n", "organization/Topics/c.md": b"c"}
    )
    assert check(repo, change) == {("organization/Topics", "name-clash")}


def test_a_record_topic_that_differs_only_in_case_is_a_clash(
    imp: tuple[Home, pygit2.Repository],
) -> None:
    _, repo = imp
    path, data = knowledge.note(NS, 1)
    commit_on_main(repo, {path: data})
    other = f"records/Vendors/acme--{NS}_2.md"
    found = check(
        repo,
        knowledge.change_of(repo, {other: knowledge.note_text(f"{NS}_2").encode()}),
        mode="append",
    )
    assert ("records/Vendors", "name-clash") in found


def test_renaming_to_another_case_is_not_a_clash(imp: tuple[Home, pygit2.Repository]) -> None:
    _, repo = imp
    commit_on_main(repo, {"organization/Topics/a.md": b"a\n", "organization/Index.md": b"i\n"})
    rename = knowledge.change_of(
        repo,
        {"organization/topics/a.md": b"a\n", "organization/index.md": b"i\n"},
        deleted={"organization/Topics/a.md", "organization/Index.md"},
    )
    assert check(repo, rename) == set()
    # a directory that keeps a file is still there
    commit_on_main(repo, {"organization/Topics/b.md": b"b\n"})
    partial = knowledge.change_of(
        repo, {"organization/topics/a.md": b"a\n"}, deleted={"organization/Topics/a.md"}
    )
    assert check(repo, partial) == {("organization/topics", "name-clash")}


def test_existing_clashes_elsewhere_are_not_this_changes_fault(
    imp: tuple[Home, pygit2.Repository],
) -> None:
    _, repo = imp
    commit_on_main(repo, {"organization/A.md": b"1\n", "organization/a.md": b"2\n"})
    assert check(repo, knowledge.change_of(repo, {"organization/A.md": b"changed\n"})) == set()
    assert check(repo, knowledge.change_of(repo, {"organization/b/x.md": b"x\n"})) == set()


def test_the_lane_rechecks_name_clashes_against_the_latest_main(
    imp: tuple[Home, pygit2.Repository],
) -> None:
    home, repo = imp
    base = main_commit(repo)
    # Landed after this run's base, by history the run never saw.
    head = commit_on_main(repo, {"records/Vendors/old.md": b"old\n"})
    path, data = knowledge.note(NS, 1)
    result = knowledge.integrate_change(
        home, knowledge.change_of(repo, {path: data}), base, limits=LIMITS
    )
    assert result.checkpoint == "conflict"
    assert [(v.path, v.rule) for v in result.violations] == [("records/vendors", "name-clash")]
    assert "Vendors" in result.violations[0].message
    assert main_commit(open_repo(home, "yuko")) == head
