"""The lane chain's head tree, edited in memory, gives libgit2's trees byte for byte, and
says exactly which files changed, which trees replaced which, and what the size moved by."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pygit2
from hypothesis import given, settings
from hypothesis import strategies as st

from impyard.knowledge.change import FileState
from impyard.knowledge.store.gitobj import changed_paths, lookup_entry
from impyard.knowledge.store.headtree import HeadTree
from impyard.knowledge.store.trees import _apply, plan_change
from impyard.knowledge.validation.sizes import blob_size, size_delta
from tests.helpers.trees import outcome, path

TREE = pygit2.enums.ObjectType.TREE

contents = st.sampled_from([b"1", b"2", b"3", b"four"])
step = st.tuples(
    st.dictionaries(path, st.tuples(contents, st.booleans()), max_size=5),
    st.sets(path, max_size=3),
)


def _names_under(tree: pygit2.Tree, prefix: str = "") -> set[tuple[str, str]]:
    """(directory, entry name) for every entry of ``tree``."""
    found = {(prefix.rstrip("/"), str(entry.name)) for entry in tree}
    for entry in tree:
        if isinstance(entry, pygit2.Tree):
            found |= _names_under(entry, f"{prefix}{entry.name}/")
    return found


def _trees_under(tree: pygit2.Tree | None, prefix: str = "") -> dict[str, bytes]:
    """Every directory of ``tree`` ('' is the top) -> its raw id."""
    if tree is None:
        return {}
    found = {prefix.rstrip("/"): tree.id.raw}
    for entry in tree:
        if isinstance(entry, pygit2.Tree):
            found.update(_trees_under(entry, f"{prefix}{entry.name}/"))
    return found


def _by_libgit2(
    repo: pygit2.Repository, tree: pygit2.Tree, states: dict[str, FileState], deleted: set[str]
) -> bytes:
    oid = _apply(repo, tree, plan_change(states, deleted), "")
    return (oid if oid is not None else repo.TreeBuilder().write()).raw


@settings(max_examples=150, deadline=None)
@given(steps=st.lists(step, min_size=1, max_size=4))
def test_edits_match_libgit2_commit_after_commit(
    steps: list[tuple[dict[str, tuple[bytes, bool]], set[str]]],
) -> None:
    with tempfile.TemporaryDirectory(dir="/var/tmp") as tmp:
        repo = pygit2.init_repository(str(Path(tmp) / "r.git"), bare=True)
        tree = repo[repo.TreeBuilder().write()].peel(pygit2.Tree)
        head = HeadTree(tree.id.raw, lambda oid: repo.odb.read(pygit2.Oid(raw=oid))[1])
        for written, deleted in steps:
            states = {
                p: FileState(str(repo.create_blob(d)), len(d), executable)
                for p, (d, executable) in written.items()
            }

            expected = outcome(lambda: _by_libgit2(repo, tree, states, deleted))  # noqa: B023
            got = outcome(lambda: head.edit(repo, states, deleted))  # noqa: B023
            if expected[0] != "tree":
                assert got == expected
                continue
            edit = got[1]
            assert edit.root == expected[1]
            for raw, body in edit.objects:
                assert repo.odb.write(TREE, body).raw == raw
            new = repo[pygit2.Oid(raw=edit.root)].peel(pygit2.Tree)
            assert edit.added().paths == tuple(changed_paths(tree, new))
            for changed, blob in edit.files:
                now = lookup_entry(new, changed)
                is_file = now is not None and not isinstance(now, pygit2.Tree)
                assert (now.id.raw if is_file else None) == blob
            moved = sum(s.size for s in states.values()) - sum(
                blob_size(repo, pygit2.Oid(raw=raw)) for raw in edit.replaced
            )
            assert moved == size_delta(repo, tree, states, deleted)
            before, after = _trees_under(tree), _trees_under(new)
            assert sorted(edit.trees) == sorted(
                (d, oid, before.get(d)) for d, oid in after.items() if before.get(d) != oid
            )
            blobs = {blob for _, blob in edit.files if blob is not None}
            trees = {oid for d, oid in after.items() if before.get(d) != oid}
            assert edit.added().objects == blobs | trees
            was, now = _names_under(tree), _names_under(new)
            assert sorted(edit.names) == sorted(
                [(d, n, True) for d, n in now - was] + [(d, n, False) for d, n in was - now]
            )
            head.accept(edit)
            tree = new


def test_a_refused_edit_leaves_the_head_as_it_was(tmp_path: Path) -> None:
    repo = pygit2.init_repository(str(tmp_path / "r.git"), bare=True)
    empty = repo.TreeBuilder().write()
    head = HeadTree(empty.raw, lambda oid: repo.odb.read(pygit2.Oid(raw=oid))[1])
    blob = str(repo.create_blob(b"x"))
    first = head.edit(repo, {"records/a.md": FileState(blob, 1, False)}, ())
    head.edit(repo, {"records/b.md": FileState(blob, 1, False)}, ())  # never accepted
    assert head.root == empty.raw
    head.accept(first)
    for _, body in first.objects:
        repo.odb.write(TREE, body)
    again = head.edit(repo, {"records/c.md": FileState(blob, 1, False)}, ())
    for _, body in again.objects:
        repo.odb.write(TREE, body)
    names = [e.name for e in repo[pygit2.Oid(raw=again.root)].peel(pygit2.Tree)["records"]]
    assert names == ["a.md", "c.md"]
