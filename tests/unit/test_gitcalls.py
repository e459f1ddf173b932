"""pygit2 calls taking a path or a ref name keep no reference to it (pygit2 leaks one)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pygit2
import pytest

from impyard.knowledge.store.gitcalls import Repository, builder_get, builder_remove, tree_has
from impyard.knowledge.store.gitobj import lookup_entry

SIG = pygit2.Signature("Test", "test@example.invalid", 1_700_000_000, 0)


@pytest.fixture
def repo(tmp_path: Path) -> Repository:
    pygit2.init_repository(str(tmp_path / "r.git"), bare=True, initial_head="main")
    repo = Repository(str(tmp_path / "r.git"))
    inner = repo.TreeBuilder()
    inner.insert("note.md", repo.create_blob(b"x"), pygit2.enums.FileMode.BLOB)
    top = repo.TreeBuilder()
    top.insert("records", inner.write(), pygit2.enums.FileMode.TREE)
    repo.create_commit("refs/heads/main", SIG, SIG, "one", top.write(), [])
    return repo


def fresh(text: str) -> str:
    """An equal string object nobody else holds (a literal would be shared)."""
    return "".join([text[:1], text[1:]])


def keeps_no_reference(call: Callable[[str], object], text: str) -> None:
    name = fresh(text)
    before = sys.getrefcount(name)
    for _ in range(3):
        call(name)
    assert sys.getrefcount(name) == before


def tree_of(repo: Repository) -> pygit2.Tree:
    return repo.revparse_single("main").peel(pygit2.Tree)


@pytest.mark.parametrize("path", ["records", "records/note.md", "records/absent.md", "nope"])
def test_lookup_entry_keeps_no_reference_to_the_path(repo: Repository, path: str) -> None:
    keeps_no_reference(lambda p: lookup_entry(tree_of(repo), p), path)


def test_lookup_entry_still_finds_and_misses(repo: Repository) -> None:
    tree = tree_of(repo)
    found = lookup_entry(tree, fresh("records/note.md"))
    assert isinstance(found, pygit2.Blob) and found.data == b"x"
    assert lookup_entry(tree, fresh("records/absent.md")) is None
    assert lookup_entry(tree, "r") is None  # one character: passed as it is
    assert lookup_entry(None, "records") is None


@pytest.mark.parametrize("name", ["records", "absent"])
def test_tree_has_keeps_no_reference(repo: Repository, name: str) -> None:
    keeps_no_reference(lambda n: tree_has(tree_of(repo), n), name)
    assert tree_has(tree_of(repo), fresh(name)) is (name == "records")


def test_builder_calls_keep_no_reference(repo: Repository) -> None:
    builder = repo.TreeBuilder(tree_of(repo))
    keeps_no_reference(lambda n: builder_get(builder, n), "records")
    keeps_no_reference(lambda n: builder_get(builder, n), "absent")
    assert builder_get(builder, fresh("absent")) is None
    name = fresh("records")
    before = sys.getrefcount(name)
    builder_remove(builder, name)
    assert sys.getrefcount(name) == before
    assert builder_get(builder, "records") is None


def test_reference_lookups_keep_no_reference(repo: Repository) -> None:
    keeps_no_reference(lambda n: repo.references.get(n), "refs/heads/main")
    keeps_no_reference(lambda n: repo.references.get(n), "refs/quarantine/run-x")
    keeps_no_reference(lambda n: n in repo.references, "refs/candidates/run-x")
    assert repo.references[fresh("refs/heads/main")].target == repo.head.target
    with pytest.raises(KeyError):
        repo.references[fresh("refs/heads/absent")]
    assert repo.references.get(fresh("refs/heads/absent")) is None


def test_many_lookups_leave_the_heap_as_it_was(repo: Repository) -> None:
    tree = tree_of(repo)
    lookup_entry(tree, fresh("warm-up"))
    blocks = sys.getallocatedblocks()
    for n in range(5000):
        lookup_entry(tree, f"records/absent-{n}.md")
        repo.references.get(f"refs/quarantine/run-{n}")
    assert sys.getallocatedblocks() - blocks < 500  # was 10,000: every string kept


def test_a_repository_is_freed_with_its_last_reference_not_by_the_collector(
    tmp_path: Path,
) -> None:
    """pygit2 stores collections on a repository that point back at it; Impyard's
    repositories are in no such cycle, so their libgit2 state goes when they do."""
    import gc
    import weakref

    pygit2.init_repository(str(tmp_path / "r.git"), bare=True, initial_head="main")
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        repo = Repository(str(tmp_path / "r.git"))
        assert list(repo.references) == [] and list(repo.branches.local) == []
        assert list(repo.remotes.names()) == []
        gone = weakref.ref(repo)
        del repo
        assert gone() is None
    finally:
        if was_enabled:
            gc.enable()
