"""The published origin: a bare, read-only-to-boxes mirror of ``main`` and nothing else.

Boxes mount ``knowledge/<imp>/origin.git`` read-only; the canonical repo is never
mounted. The mirror carries only ``refs/heads/main`` (no candidate or quarantine
refs, whose content was refused), no hooks and a minimal config. It is refreshed
by copying just the objects main gained since the mirror's main — O(change) for
a one-commit advance — and then moving its main.
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path
from typing import cast

import pygit2

from impyard.fsutil import fsync_dir, locked
from impyard.home import Home
from impyard.knowledge.repo import MAIN, TREE_MODE, main_commit, open_repo


def publish_origin(home: Home, imp: str) -> str:
    """Bring origin.git's main up to the canonical main (under the lane lock); return its sha."""
    repo = open_repo(home, imp)
    with locked(home.lane_lock(imp)):
        return sync_origin(repo, home.origin(imp))


def sync_origin(repo: pygit2.Repository, origin_path: Path) -> str:
    """The lock-free core: callers hold the lane lock (or own the directory, at creation)."""
    head = main_commit(repo)
    origin = _open_or_create(origin_path)
    _copy_commits(repo, origin, pygit2.Oid(hex=head))
    origin.references.create(MAIN, pygit2.Oid(hex=head), force=True)
    # Only main may ever be published; drop anything else that appeared.
    for name in list(origin.references):
        if name != MAIN:
            origin.references.delete(name)
    return head


def _open_or_create(path: Path) -> pygit2.Repository:
    if path.is_dir():
        return pygit2.Repository(str(path))
    # Build beside it and rename, so a box never sees a half-made mirror.
    staging = path.with_name(f".{path.name}-{uuid.uuid4().hex[:8]}")
    try:
        pygit2.init_repository(str(staging), bare=True, initial_head="main")
        shutil.rmtree(staging / "hooks", ignore_errors=True)
        (staging / "hooks").mkdir()
        shutil.rmtree(staging / "info", ignore_errors=True)
        (staging / "description").unlink(missing_ok=True)
        os.rename(staging, path)
        fsync_dir(path.parent)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return pygit2.Repository(str(path))


def _copy_commits(src: pygit2.Repository, dst: pygit2.Repository, head: pygit2.Oid) -> None:
    """Copy commits (oldest first) and their new trees/blobs until history dst already has."""
    missing: list[pygit2.Oid] = []
    stack = [head]
    seen: set[pygit2.Oid] = set()
    while stack:
        oid = stack.pop()
        if oid in seen or dst.odb.exists(oid):
            continue
        seen.add(oid)
        missing.append(oid)
        stack.extend(_commit(src, oid).parent_ids)
    # A commit is written only after its tree and parents, so "exists in dst"
    # always means "complete in dst" and later syncs can stop there.
    for oid in reversed(_topo(src, missing)):
        _copy_tree(src, dst, _commit(src, oid).tree_id)
        _copy_object(src, dst, oid)


def _topo(src: pygit2.Repository, commits: list[pygit2.Oid]) -> list[pygit2.Oid]:
    """Children before parents (reverse gives parents first)."""
    wanted = set(commits)
    order: list[pygit2.Oid] = []
    done: set[pygit2.Oid] = set()

    def visit(oid: pygit2.Oid) -> None:
        stack = [(oid, False)]
        while stack:
            current, expanded = stack.pop()
            if current in done:
                continue
            if expanded:
                done.add(current)
                order.append(current)
                continue
            stack.append((current, True))
            stack.extend((p, False) for p in _commit(src, current).parent_ids if p in wanted)

    for oid in commits:
        visit(oid)
    order.reverse()
    return order


def _copy_tree(src: pygit2.Repository, dst: pygit2.Repository, tree_id: pygit2.Oid) -> None:
    if dst.odb.exists(tree_id):
        return  # written after all its children, so complete
    for entry in cast(pygit2.Tree, src[tree_id]):
        if entry.filemode == TREE_MODE:
            _copy_tree(src, dst, entry.id)
        elif not dst.odb.exists(entry.id):
            _copy_object(src, dst, entry.id)
    _copy_object(src, dst, tree_id)


def _copy_object(src: pygit2.Repository, dst: pygit2.Repository, oid: pygit2.Oid) -> None:
    kind, data = src.odb.read(oid)[:2]
    written = dst.odb.write(kind, data)
    if written != oid:  # pragma: no cover - would mean a corrupt source odb
        raise RuntimeError(f"object {oid} changed while copying")


def _commit(repo: pygit2.Repository, oid: pygit2.Oid) -> pygit2.Commit:
    return cast(pygit2.Commit, repo[oid])
