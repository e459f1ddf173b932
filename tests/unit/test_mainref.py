"""A run's base is read from main's ref file, without opening the repository."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pygit2
import pytest

from impyard.common.errors import KnowledgeError
from impyard.knowledge.store.mainref import read_main
from impyard.knowledge.store.repo import main_commit


def _repo(tmp_path: Path) -> tuple[Path, str]:
    path = tmp_path / "repo.git"
    repo = pygit2.init_repository(str(path), bare=True, initial_head="main")
    sig = pygit2.Signature("t", "t@localhost")
    tree = repo.TreeBuilder().write()
    commit = repo.create_commit("refs/heads/main", sig, sig, "one\n", tree, [])
    return path, str(commit)


def test_main_is_read_from_its_loose_ref(tmp_path: Path) -> None:
    path, commit = _repo(tmp_path)
    assert read_main(path) == commit


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_main_packed_by_git_is_read_from_packed_refs(tmp_path: Path) -> None:
    path, commit = _repo(tmp_path)
    subprocess.run(["git", "--git-dir", str(path), "pack-refs", "--all"], check=True)
    assert not (path / "refs/heads/main").exists()
    assert read_main(path) == commit


def test_a_ref_file_that_is_no_object_id_is_left_to_libgit2(tmp_path: Path) -> None:
    """A symbolic main (or anything but one id) is read by pygit2: the answer is the one
    the lane's own reader gives."""
    path, commit = _repo(tmp_path)
    repo = pygit2.Repository(str(path))
    repo.references.create("refs/heads/trunk", commit)
    (path / "refs/heads/main").write_text("ref: refs/heads/trunk\n")
    assert read_main(path) == main_commit(pygit2.Repository(str(path)))


def test_a_missing_main_says_so(tmp_path: Path) -> None:
    path, _ = _repo(tmp_path)
    (path / "refs/heads/main").unlink()
    with pytest.raises(KnowledgeError, match="branch main is missing"):
        read_main(path)
