"""Tree lookups and the O(changes) tree diff the lane rechecks with."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pygit2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from impyard.common.errors import KnowledgeError
from impyard.knowledge.store.gitobj import changed_paths, commit_at, lookup_entry
from tests.helpers.checkout import build_tree

# Small path alphabet so that files and directories collide (a/b as file vs a/b/c).
segment = st.sampled_from(["a", "b", "c"])
path = st.lists(segment, min_size=1, max_size=3).map("/".join)
contents = st.sampled_from([b"1", b"2"])
files = st.dictionaries(path, contents, max_size=8)


def consistent(tree: dict[str, bytes]) -> dict[str, bytes]:
    """Drop paths that sit under another file (a file cannot also be a directory)."""
    kept: dict[str, bytes] = {}
    for p in sorted(tree, key=len):
        if not any(p.startswith(q + "/") for q in kept):
            kept[p] = tree[p]
    return kept


def libgit2_paths(repo: pygit2.Repository, old: pygit2.Tree, new: pygit2.Tree) -> set[str]:
    return {
        p
        for delta in old.diff_to_tree(new).deltas
        for p in (delta.old_file.path, delta.new_file.path)
    }


@settings(max_examples=200, deadline=None)
@given(files, files)
def test_changed_paths_agrees_with_libgit2_diff(before: dict, after: dict) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        repo = pygit2.init_repository(str(Path(tmp) / "r.git"), bare=True)
        old = repo[build_tree(repo, consistent(before))]
        new = repo[build_tree(repo, consistent(after))]
        assert isinstance(old, pygit2.Tree) and isinstance(new, pygit2.Tree)
        ours = list(changed_paths(old, new))
        assert len(ours) == len(set(ours))
        assert set(ours) == libgit2_paths(repo, old, new)


def test_lookups_name_what_is_missing(tmp_path: Path) -> None:
    repo = pygit2.init_repository(str(tmp_path / "r.git"), bare=True)
    tree = repo[build_tree(repo, {"records/x.md": b"x"})]
    assert isinstance(tree, pygit2.Tree)
    assert lookup_entry(tree, "records/x.md") is not None
    assert lookup_entry(tree, "records/y.md") is None
    assert lookup_entry(None, "records") is None
    with pytest.raises(KnowledgeError, match="is not in"):
        commit_at(repo, "0" * 40)
    with pytest.raises(KnowledgeError, match="is not a commit"):
        commit_at(repo, str(tree.id))
