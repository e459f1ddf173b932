"""Hand-built repositories and mounted checkouts for the checkout, layer and snapshot tests."""

from __future__ import annotations

import contextlib
import os
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pygit2
import pytest

from impyard.home import Home
from impyard.knowledge.checkouts.checkout import Checkout, mount_options

IMP = "yuko"
OWNER = (65532, 65532)
SIG = pygit2.Signature("Test", "test@example.invalid", 1_700_000_000, 0)


def make_repo(home: Home, imp: str = IMP) -> pygit2.Repository:
    path = home.repo(imp)
    path.parent.mkdir(parents=True, exist_ok=True)
    return pygit2.init_repository(str(path), bare=True, initial_head="main")


def files_of(repo: pygit2.Repository, commit: str | None) -> dict[str, bytes]:
    if commit is None:
        return {}
    out: dict[str, bytes] = {}

    def walk(tree: pygit2.Tree, prefix: str) -> None:
        for entry in tree:
            if isinstance(entry, pygit2.Tree):
                walk(entry, f"{prefix}{entry.name}/")
            else:
                assert isinstance(entry, pygit2.Blob)
                out[f"{prefix}{entry.name}"] = entry.data

    obj = repo[commit]
    assert isinstance(obj, pygit2.Commit)
    walk(obj.tree, "")
    return out


def build_tree(repo: pygit2.Repository, files: dict[str, bytes]) -> pygit2.Oid:
    nested: dict[str, object] = {}
    for path, data in files.items():
        node = nested
        *dirs, name = path.split("/")
        for d in dirs:
            child = node.setdefault(d, {})
            assert isinstance(child, dict)
            node = child
        node[name] = data

    def write(node: dict[str, object]) -> pygit2.Oid:
        tb = repo.TreeBuilder()
        for name, value in node.items():
            if isinstance(value, dict):
                tb.insert(name, write(value), pygit2.enums.FileMode.TREE)
            else:
                assert isinstance(value, bytes)
                tb.insert(name, repo.create_blob(value), pygit2.enums.FileMode.BLOB)
        return tb.write()

    return write(nested)


def commit(
    repo: pygit2.Repository, changes: dict[str, bytes | None], parent: str | None = None
) -> str:
    """A commit on main: ``parent``'s files with ``changes`` applied (None deletes)."""
    files = files_of(repo, parent)
    for path, data in changes.items():
        if data is None:
            files = {p: d for p, d in files.items() if p != path and not p.startswith(path + "/")}
        else:
            # a new path replaces a directory at it, and files at its ancestors
            files = {
                p: d
                for p, d in files.items()
                if not p.startswith(path + "/") and not path.startswith(p + "/")
            }
            files[path] = data
    tree = build_tree(repo, files)
    parents = [] if parent is None else [pygit2.Oid(hex=parent)]
    oid = repo.create_commit(None, SIG, SIG, "test", tree, parents)
    repo.references.create("refs/heads/main", oid, force=True)
    return str(oid)


BASE_FILES = {
    "README.md": b"# knowledge\n",
    "records/vendors/acme--n_000000000000_1.md": b"acme\n",
    "records/vendors/globex--n_000000000000_2.md": b"globex\n",
    "records/papers/attention--n_000000000000_3.md": b"attention\n",
    "organization/index.md": b"index\n",
    "organization/topics/vendors.md": b"vendors\n",
}


def read_dir(root: Path) -> dict[str, bytes]:
    """Every regular file under ``root`` (whiteouts and other non-files skipped)."""
    out = {}
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            full = Path(dirpath) / name
            if stat.S_ISREG(os.lstat(full).st_mode):
                out[str(full.relative_to(root))] = full.read_bytes()
    return out


def need_root() -> None:
    if os.geteuid() != 0:
        if os.environ.get("CI") == "true":
            pytest.fail("overlay tests need root under CI")
        pytest.skip("overlay mounts need root")


@contextlib.contextmanager
def mounted(checkout: Checkout, merged: Path) -> Iterator[Path]:
    """The checkout mounted as the box would see it (kernel overlayfs)."""
    need_root()
    merged.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        ["mount", "-t", "overlay", "overlay", "-o", mount_options(checkout), str(merged)],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        if os.environ.get("CI") == "true":
            pytest.fail(f"overlay mount failed: {proc.stderr}")
        pytest.skip(f"overlay mount unsupported here: {proc.stderr}")
    try:
        yield merged
    finally:
        subprocess.run(["umount", str(merged)], check=True)


def as_box(script: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run a shell script as the box user with ``cwd`` as its knowledge dir."""
    return subprocess.run(
        ["/bin/sh", "-c", script],
        cwd=cwd,
        user=OWNER[0],
        group=OWNER[1],
        extra_groups=[],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
