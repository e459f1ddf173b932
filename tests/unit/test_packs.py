"""Packs written in Python: git and libgit2 accept them, and trees built for a pack match
libgit2's TreeBuilder byte for byte."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pygit2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from impyard.common.errors import KnowledgeError
from impyard.knowledge.change import FileState
from impyard.knowledge.store import packfile, packs
from impyard.knowledge.store.packfile import PackWriter
from impyard.knowledge.store.packs import ObjectBatch, object_id, pack_object_ids
from impyard.knowledge.store.trees import _apply, _build_packed, plan_change
from tests.helpers.git import git
from tests.helpers.repo import assert_fsck_clean
from tests.helpers.trees import outcome, path

BLOB = pygit2.enums.ObjectType.BLOB


def bare(path: Path) -> pygit2.Repository:
    return pygit2.init_repository(str(path), bare=True, initial_head="main")


def pack_files(repo: pygit2.Repository) -> list[str]:
    return sorted(os.listdir(Path(repo.path) / "objects" / "pack"))


def loose_count(repo: pygit2.Repository) -> int:
    objects = Path(repo.path) / "objects"
    return sum(len(os.listdir(d)) for d in objects.iterdir() if len(d.name) == 2)


@pytest.mark.parametrize("large_offsets", [False, True])
def test_pack_is_accepted_by_git_and_libgit2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, large_offsets: bool
) -> None:
    if large_offsets:
        # Every entry past the first goes through the 64-bit offset table.
        monkeypatch.setattr(packfile, "_LARGE_OFFSET", 13)
    repo = bare(tmp_path / "r.git")
    # Sizes around the 4-bit and 7-bit boundaries of the entry header, an empty blob,
    # a large one and a repeated one.
    blobs = [os.urandom(n) for n in (0, 1, 15, 16, 17, 127, 128, 2047, 2048, 300_000)]
    blobs += [b"same\n", b"same\n"]
    writer = PackWriter(tmp_path / "r.git" / "objects" / "pack")
    for data in blobs:
        writer.add(BLOB, data, object_id(BLOB, data))
    tree = b"100644 a\0" + object_id(BLOB, b"same\n")
    writer.add(pygit2.enums.ObjectType.TREE, tree, object_id(pygit2.enums.ObjectType.TREE, tree))
    name = writer.finish()

    assert pack_files(repo) == [f"{name}.idx", f"{name}.pack"]
    idx = Path(repo.path) / "objects" / "pack" / f"{name}.idx"
    assert git("verify-pack", idx).returncode == 0
    assert_fsck_clean(repo.path)
    for data in blobs:
        assert repo[pygit2.Oid(raw=object_id(BLOB, data))].data == data
    stored = repo[pygit2.Oid(raw=object_id(pygit2.enums.ObjectType.TREE, tree))]
    assert stored.peel(pygit2.Tree)["a"].data == b"same\n"
    listed = pack_object_ids(idx, at_most=100)
    assert listed is not None and len(listed) == len(set(blobs)) + 1
    assert pack_object_ids(idx, at_most=3) is None
    assert (idx.stat().st_mode & 0o777) == 0o444


def test_batch_stays_loose_below_the_threshold(tmp_path: Path) -> None:
    repo = bare(tmp_path / "r.git")
    with ObjectBatch(repo) as batch:
        oids = [batch.add(BLOB, f"note {i}\n".encode()) for i in range(packs.PACK_THRESHOLD - 1)]
        assert not repo.odb.exists(pygit2.Oid(raw=oids[0]))  # nothing written before write()
        assert batch.write() is None
    assert pack_files(repo) == []
    assert loose_count(repo) == packs.PACK_THRESHOLD - 1
    assert all(repo.odb.exists(pygit2.Oid(raw=oid)) for oid in oids)


def test_batch_of_many_is_one_pack(tmp_path: Path) -> None:
    repo = bare(tmp_path / "r.git")
    with ObjectBatch(repo) as batch:
        oids = [batch.add(BLOB, f"note {i}\n".encode()) for i in range(500)]
        batch.add(BLOB, b"note 0\n")  # a duplicate is stored once
        name = batch.write()
    assert name is not None and pack_files(repo) == [f"{name}.idx", f"{name}.pack"]
    assert loose_count(repo) == 0
    # readable through the same repository object, at once
    assert all(
        repo[pygit2.Oid(raw=oid)].data == f"note {i}\n".encode() for i, oid in enumerate(oids)
    )
    assert_fsck_clean(repo.path)


def test_a_failed_batch_leaves_nothing_behind(tmp_path: Path) -> None:
    repo = bare(tmp_path / "r.git")
    with pytest.raises(RuntimeError), ObjectBatch(repo) as batch:
        for i in range(200):
            batch.add(BLOB, f"note {i}\n".encode())
        raise RuntimeError("host fault mid-snapshot")
    assert pack_files(repo) == [] and loose_count(repo) == 0


def test_a_pack_is_never_visible_without_its_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = bare(tmp_path / "r.git")
    blobs = [f"note {i}\n".encode() for i in range(100)]
    real_replace = os.replace

    def crash_on_index(src: str | Path, dst: str | Path) -> None:
        if str(dst).endswith(".idx"):
            raise OSError("power cut")
        real_replace(src, dst)

    monkeypatch.setattr(packfile.os, "replace", crash_on_index)
    with pytest.raises(OSError, match="power cut"), ObjectBatch(repo) as batch:
        for data in blobs:
            batch.add(BLOB, data)
        batch.write()
    # A .pack without its .idx is invisible to readers, and no temporary file is left.
    assert [n for n in pack_files(repo) if not n.endswith(".pack")] == []
    assert not pygit2.Repository(repo.path).odb.exists(pygit2.hash(blobs[0]))
    monkeypatch.undo()
    with ObjectBatch(repo) as batch:
        for data in blobs:
            batch.add(BLOB, data)
        batch.write()
    assert pygit2.Repository(repo.path)[pygit2.hash(blobs[0])].data == blobs[0]
    assert_fsck_clean(repo.path)


# --- trees serialized for a pack == trees from libgit2's TreeBuilder ----------------------

contents = st.sampled_from([b"1", b"2", b"3"])


def _consistent(files: dict[str, bytes]) -> dict[str, bytes]:
    kept: dict[str, bytes] = {}
    for p in sorted(files, key=len):
        if not any(p.startswith(q + "/") for q in kept):
            kept[p] = files[p]
    return kept


def _tree_of(repo: pygit2.Repository, files: dict[str, bytes]) -> pygit2.Tree | None:
    if not files:
        return None
    written = {p: FileState(str(repo.create_blob(d)), len(d), False) for p, d in files.items()}
    oid = _apply(repo, None, plan_change(written, ()), "")
    assert oid is not None
    return repo[oid].peel(pygit2.Tree)


@settings(max_examples=150, deadline=None)
@given(
    base=st.dictionaries(path, contents, max_size=8),
    written=st.dictionaries(path, st.tuples(contents, st.booleans()), max_size=6),
    deleted=st.sets(path, max_size=4),
)
def test_packed_trees_match_treebuilder(
    base: dict[str, bytes], written: dict[str, tuple[bytes, bool]], deleted: set[str]
) -> None:
    with tempfile.TemporaryDirectory(dir="/var/tmp") as tmp:
        repo = bare(Path(tmp) / "r.git")
        tree = _tree_of(repo, _consistent(base))
        states = {
            p: FileState(str(repo.create_blob(d)), len(d), executable)
            for p, (d, executable) in written.items()
        }
        plan = plan_change(states, deleted)

        def by_libgit2() -> str:
            oid = _apply(repo, tree, plan, "")
            return str(oid if oid is not None else repo.TreeBuilder().write())

        expected = outcome(by_libgit2)
        assert outcome(lambda: str(_build_packed(repo, tree, plan))) == expected


@pytest.mark.parametrize("name", [".git", ".GIT", ".git.", "git~1", ".git::$DATA", "..", ""])
def test_packed_trees_refuse_what_treebuilder_refuses(tmp_path: Path, name: str) -> None:
    repo = bare(tmp_path / "r.git")
    state = FileState(str(repo.create_blob(b"x")), 1, False)
    plan = plan_change({f"records/{name}": state}, ())
    with pytest.raises(KnowledgeError):
        _apply(repo, None, plan, "")
    with pytest.raises(KnowledgeError):
        _build_packed(repo, None, plan)
    assert pack_files(repo) == []


def test_packed_trees_refuse_a_missing_blob(tmp_path: Path) -> None:
    repo = bare(tmp_path / "r.git")
    plan = plan_change({"records/a.md": FileState("1" * 40, 1, False)}, ())
    with pytest.raises(KnowledgeError, match="no blob"):
        _build_packed(repo, None, plan)
    assert pack_files(repo) == []
