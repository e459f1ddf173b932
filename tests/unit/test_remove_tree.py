"""Removing box-written trees: any depth, never through a symlink, never opening a fifo."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from impyard.common.fsutil import remove_tree


def nest(root: Path, depth: int, name: str = "d" * 40) -> None:
    """``depth`` nested directories below ``root`` (deeper than PATH_MAX as a path)."""
    root.mkdir()
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for level in range(depth):
            os.mkdir(name, dir_fd=fd)
            child = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
            if level % 500 == 0:
                os.close(os.open("note.md", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd))
    finally:
        os.close(fd)


def test_a_tree_deeper_than_the_recursion_limit_is_removed(tmp_path: Path) -> None:
    root = tmp_path / "checkout"
    nest(root, 2000)
    with pytest.raises(RecursionError):
        shutil.rmtree(root)  # what cleanup did before: the host crashed here
    remove_tree(root)
    assert not root.exists()


def test_links_fifos_and_locked_directories_are_removed_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("host file\n")
    root = tmp_path / "checkout"
    (root / "records" / "t").mkdir(parents=True)
    (root / "records" / "t" / "link").symlink_to(outside)
    (root / "escape").symlink_to(outside / "keep.txt")
    os.mkfifo(root / "records" / "pipe")
    locked = root / "records" / "locked"
    (locked / "inner").mkdir(parents=True)
    (locked / "inner" / "f.md").write_text("x")
    locked.chmod(0)
    remove_tree(root)
    assert not root.exists()
    assert (outside / "keep.txt").read_text() == "host file\n"


def test_a_missing_path_or_a_file_or_a_link(tmp_path: Path) -> None:
    remove_tree(tmp_path / "absent")
    target = tmp_path / "target"
    target.mkdir()
    link = tmp_path / "link"
    link.symlink_to(target)
    remove_tree(link)
    assert not link.exists() and target.is_dir()
    plain = tmp_path / "plain.txt"
    plain.write_text("x")
    remove_tree(plain)
    assert not plain.exists()
