"""A run's tree across the cluster: packed by a node, judged and unpacked here."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

from impyard.cluster.treetar import TreeRefused, TreeTooLarge, judge, pack, unpack


def _tar(path: Path, entries: list[tuple[str, str, bytes]]) -> Path:
    with tarfile.open(path, "w") as tar:
        for name, kind, data in entries:
            info = tarfile.TarInfo(name)
            if kind == "dir":
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif kind == "symlink":
                info.type, info.linkname = tarfile.SYMTYPE, data.decode()
                tar.addfile(info)
            elif kind == "hardlink":
                info.type, info.linkname = tarfile.LNKTYPE, data.decode()
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return path


def test_a_tree_packs_and_unpacks_as_it_was_without_following_links(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "records" / "t").mkdir(parents=True)
    (src / "records" / "t" / "a.md").write_text("alpha\n")
    (src / "run.sh").write_text("#!/bin/sh\n")
    os.chmod(src / "run.sh", 0o755)
    (src / "link").symlink_to("/etc/passwd")
    os.mkfifo(src / "pipe")
    archive = tmp_path / "tree.tar"
    with open(archive, "wb") as out:
        assert pack(src, out, 1 << 20) == len("alpha\n") + len("#!/bin/sh\n")
    with pytest.raises(TreeRefused) as refused:  # a fifo is no part of a tree
        judge(archive, 1 << 20)
    assert refused.value.reasons == ["pipe: a fifo cannot be part of a tree"]
    os.unlink(src / "pipe")
    with open(archive, "wb") as out:
        pack(src, out, 1 << 20)
    dest = tmp_path / "dest"
    dest.mkdir()
    unpack(archive, dest, 1 << 20)
    assert (dest / "records" / "t" / "a.md").read_text() == "alpha\n"
    assert os.access(dest / "run.sh", os.X_OK)
    assert os.readlink(dest / "link") == "/etc/passwd"  # kept as a link, for the gate to refuse


def test_packing_stops_at_the_bound(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "big").write_bytes(b"x" * 2000)
    with pytest.raises(TreeTooLarge), open(tmp_path / "t.tar", "wb") as out:
        pack(src, out, 1000)


def test_an_archive_no_box_could_make_is_refused_with_every_reason(tmp_path: Path) -> None:
    archive = _tar(
        tmp_path / "bad.tar",
        [
            ("../escape", "file", b"x"),
            ("/abs", "file", b"x"),
            ("a/./b", "file", b"x"),
            ("dir", "dir", b""),
            ("dir/link", "symlink", b"/etc"),
            ("dir/link/passwd", "file", b"x"),
            ("hard", "hardlink", b"dir"),
            ("twice", "file", b"1"),
            ("twice", "file", b"2"),
        ],
    )
    dest = tmp_path / "dest"
    dest.mkdir()
    with pytest.raises(TreeRefused) as refused:
        unpack(archive, dest, 1 << 20)
    assert refused.value.reasons == [
        "../escape: the name leaves the tree or is not plain",
        "/abs: the name leaves the tree or is not plain",
        "a/./b: the name leaves the tree or is not plain",
        "dir/link/passwd: lies under a symlink",
        "hard: a hard link cannot be part of a tree",
        "twice: appears twice",
    ]
    assert list(dest.iterdir()) == []  # nothing written
    assert not (tmp_path / "escape").exists()


def test_an_archive_over_the_bound_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    archive = _tar(tmp_path / "big.tar", [("a", "file", b"x" * 600), ("b", "file", b"y" * 600)])
    dest = tmp_path / "dest"
    dest.mkdir()
    with pytest.raises(TreeRefused, match="holds 1,200 bytes, over 1,000"):
        unpack(archive, dest, 1000)
    assert list(dest.iterdir()) == []


def test_a_live_repository_packs_its_refs_before_its_objects(tmp_path: Path) -> None:
    repo = tmp_path / "origin.git"
    for part in ("objects/pack", "objects/ab", "refs/heads"):
        (repo / part).mkdir(parents=True)
    (repo / "HEAD").write_text("ref: refs/heads/main\n")
    (repo / "refs/heads/main").write_text("ab" * 20 + "\n")
    (repo / "objects/ab/cdef").write_bytes(b"obj")
    archive = tmp_path / "origin.tar"
    with open(archive, "wb") as out:
        pack(repo, out, 1 << 20, live_repo=True)
    with tarfile.open(archive) as tar:
        names = tar.getnames()
    # An object the lane adds meanwhile may be missed; one a packed ref names never is.
    assert names.index("refs/heads/main") < names.index("objects/ab/cdef")
    assert names[:2] == ["HEAD", "refs"]


def test_an_origin_update_leaves_out_what_the_node_holds_but_never_a_ref(tmp_path: Path) -> None:
    from impyard.cluster.treetar import holdings

    repo = tmp_path / "origin.git"
    for part in ("objects/ab", "refs/heads"):
        (repo / part).mkdir(parents=True)
    (repo / "HEAD").write_text("ref: refs/heads/main\n")
    (repo / "refs/heads/main").write_text("ab" * 20 + "\n")
    (repo / "objects/ab/old").write_bytes(b"old")
    node_copy = tmp_path / "copy"
    node_copy.mkdir()
    unpack(_packed(repo, tmp_path / "first.tar", None), node_copy, 1 << 20)
    (repo / "objects/ab/new").write_bytes(b"new")
    (repo / "refs/heads/main").write_text("cd" * 20 + "\n")  # same size, new value
    update = _packed(repo, tmp_path / "second.tar", holdings(node_copy))
    with tarfile.open(update) as tar:
        files = sorted(m.name for m in tar.getmembers() if m.isreg())
    assert files == ["HEAD", "objects/ab/new", "refs/heads/main"]


def _packed(repo: Path, archive: Path, have: dict[str, int] | None) -> Path:
    with open(archive, "wb") as out:
        pack(repo, out, 1 << 20, live_repo=True, have=have)
    return archive
