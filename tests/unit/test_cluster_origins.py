"""A node's copy of an imp's published origin, brought up to date from what the control
plane sends: only what the copy lacks, refs always, and nothing of a hostile update."""

from __future__ import annotations

import contextlib
import io
import json
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import pygit2
import pytest

from impyard.cluster import treetar
from impyard.cluster.node.origins import Origins
from impyard.cluster.treetar import TreeRefused, pack
from impyard.knowledge.store import fold


class Plane:
    """Answers a node's origin update as the control plane's API does, from ``origin``."""

    def __init__(self, origin: Path) -> None:
        self.origin = origin
        self.asked: list[dict[str, int]] = []
        self.answer_bytes: bytes | None = None

    @contextlib.contextmanager
    def answer(
        self, method: str, path: str, token: str, body: bytes, limit: int
    ) -> Iterator[BinaryIO]:
        assert (method, path) == ("POST", "/runs/run-1/origin")
        have = json.loads(body)["have"]
        self.asked.append(have)
        if self.answer_bytes is not None:
            yield io.BytesIO(self.answer_bytes)
            return
        out = io.BytesIO()
        pack(self.origin, out, limit, live_repo=True, have=have)
        yield io.BytesIO(out.getvalue())


def _commit(repo: pygit2.Repository, text: str) -> pygit2.Oid:
    blob = repo.create_blob(text.encode())
    builder = repo.TreeBuilder()
    builder.insert("note.md", blob, pygit2.GIT_FILEMODE_BLOB)
    sig = pygit2.Signature("t", "t@example.invalid", 0, 0)
    tip = repo.references.get("refs/heads/main")
    parents = [] if tip is None else [tip.target]
    return repo.create_commit("refs/heads/main", sig, sig, text, builder.write(), parents)


def _update(origins: Origins, plane: Plane) -> Path:
    return origins.update(plane, "run-1", "token", "ada")  # type: ignore[arg-type]


def test_a_copy_follows_the_origin_and_is_sent_only_what_it_lacks(tmp_path: Path) -> None:
    origin = pygit2.init_repository(str(tmp_path / "origin.git"), bare=True)
    _commit(origin, "first")
    plane = Plane(tmp_path / "origin.git")
    origins = Origins(tmp_path / "origins")
    copy = _update(origins, plane)
    second = _commit(origin, "second")
    copy = _update(origins, plane)
    mirror = pygit2.Repository(str(copy))
    assert mirror.references["refs/heads/main"].target == second
    assert mirror[second].parents[0].message == "first"
    # The second update was asked with everything the first brought.
    first_objects = {p for p in plane.asked[1] if p.startswith("objects/")}
    assert len(first_objects) == 3  # blob, tree, commit of the first note
    assert not [p for p in copy.parent.iterdir() if p.name.startswith(".update-")]


def test_a_hostile_update_is_refused_whole_and_the_copy_is_untouched(tmp_path: Path) -> None:
    origin = pygit2.init_repository(str(tmp_path / "origin.git"), bare=True)
    first = _commit(origin, "first")
    plane = Plane(tmp_path / "origin.git")
    origins = Origins(tmp_path / "origins")
    copy = _update(origins, plane)
    before = sorted(p.relative_to(copy) for p in copy.rglob("*"))
    hostile = io.BytesIO()
    with tarfile.open(fileobj=hostile, mode="w") as tar:
        for name, data in (("objects/ab/cd", b"x"), ("../escape", b"y"), ("refs/heads/main", b"z")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("objects/link")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc"
        tar.addfile(link)
    plane.answer_bytes = hostile.getvalue()
    with pytest.raises(TreeRefused) as refused:
        _update(origins, plane)
    reasons = "\n".join(refused.value.reasons)
    assert "../escape" in reasons and "objects/link" in reasons
    assert sorted(p.relative_to(copy) for p in copy.rglob("*")) == before
    assert not (tmp_path / "escape").exists()
    assert pygit2.Repository(str(copy)).references["refs/heads/main"].target == first


def test_what_the_origin_no_longer_holds_leaves_the_copy(tmp_path: Path) -> None:
    """A purge or repack on the control plane reaches every node's copy at its next run."""
    origin_dir = tmp_path / "origin.git"
    origin = pygit2.init_repository(str(origin_dir), bare=True)
    first = _commit(origin, "first")
    origin.references.create("refs/candidates/run-9", first)
    plane = Plane(origin_dir)
    origins = Origins(tmp_path / "origins")
    copy = _update(origins, plane)
    assert (copy / "refs/candidates/run-9").is_file()
    loose = sorted(p.relative_to(origin_dir) for p in (origin_dir / "objects").glob("??/*"))
    assert loose
    # The owner purges: the candidate ref and the first note's objects leave the origin.
    origin.references.delete("refs/candidates/run-9")
    for path in loose:
        (origin_dir / path).unlink()
    second = _commit(origin, "second, on an empty history")
    _update(origins, plane)
    assert not (copy / "refs/candidates/run-9").exists()
    assert [p for p in loose if (copy / p).exists()] == []
    assert pygit2.Repository(str(copy)).references["refs/heads/main"].target == second
    # The next update neither asks for nor deletes anything twice.
    _update(origins, plane)
    assert not any(str(p) in plane.asked[-1] for p in loose)


def test_objects_folded_while_an_update_is_read_arrive_in_their_new_pack(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lane folds the origin's loose objects into a pack after the update listed them
    and before it read them: the update lists the packs again and carries the new one."""
    origin_dir = tmp_path / "origin.git"
    origin = pygit2.init_repository(str(origin_dir), bare=True)
    for n in range(5):
        second = _commit(origin, f"note {n}")
    real_add = treetar._add
    folded: list[object] = []

    def add_then_fold(tar: tarfile.TarFile, info: tarfile.TarInfo, *args: object) -> int:
        if not folded and info.name.startswith("objects/") and "/pack/" not in info.name:
            with monkeypatch.context() as fold_now:
                fold_now.setattr(fold, "LOOSE_DIRS", 1)
                folded.append(fold.fold_objects(pygit2.Repository(str(origin_dir))))
        return real_add(tar, info, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(treetar, "_add", add_then_fold)
    copy = _update(Origins(tmp_path / "origins"), Plane(origin_dir))
    assert folded and folded[0] is not None
    mirror = pygit2.Repository(str(copy))
    assert mirror.references["refs/heads/main"].target == second
    assert [c.message for c in mirror.walk(second)] == [f"note {n}" for n in range(4, -1, -1)]
