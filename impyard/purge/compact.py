"""A repository down to what its refs reach: one pack of every reachable object, then
everything else deleted (other packs, loose objects, reflogs, commit graphs).

Git keeps what no ref names until its own gc, and a purged blob must not survive in
an unreachable object. The host never runs the git CLI, so this is done here: the
reachable objects are written into one new durable pack first (``pack``), the caller
moves its refs, and only then does ``drop_all_but`` delete the rest. A host that dies
before the deletion leaves the old objects beside the new pack; the purge, run again,
compacts again.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from pathlib import Path

import pygit2

from impyard.common.fsutil import fsync_dir
from impyard.knowledge.store.fold import LOOSE_DIR
from impyard.knowledge.store.packfile import PackWriter
from impyard.knowledge.store.packs import pack_dir
from impyard.purge.selector import commit_refs

_GITLINK = pygit2.enums.FileMode.COMMIT


def reachable(repo: pygit2.Repository, tips: Iterable[pygit2.Oid]) -> list[pygit2.Oid]:
    """Every object the tips reach (their commits' whole history), each once."""
    seen: set[pygit2.Oid] = set()
    order: list[pygit2.Oid] = []
    stack = list(dict.fromkeys(tips))
    while stack:
        oid = stack.pop()
        if oid in seen:
            continue
        seen.add(oid)
        order.append(oid)
        obj = repo[oid]
        if isinstance(obj, pygit2.Commit):
            stack.append(obj.tree_id)
            stack.extend(obj.parent_ids)
        elif isinstance(obj, pygit2.Tree):
            for entry in obj:
                if entry.type_str == "blob":  # listed without reading it
                    if entry.id not in seen:
                        seen.add(entry.id)
                        order.append(entry.id)
                elif entry.filemode != _GITLINK:  # a gitlink names another repo's commit
                    stack.append(entry.id)
        elif isinstance(obj, pygit2.Tag):
            stack.append(obj.target)
    return order


def pack(repo: pygit2.Repository, tips: Iterable[pygit2.Oid]) -> tuple[str, int]:
    """Write every object the tips reach into one durable pack: its name, and how many."""
    objects = reachable(repo, tips)
    writer = PackWriter(pack_dir(repo))
    try:
        for oid in objects:
            kind, data = repo.odb.read(oid)
            writer.add(kind, data, oid.raw)
        return writer.finish(), len(objects)
    finally:
        writer.abort()


def drop_all_but(git_dir: Path, keep_pack: str) -> int:
    """Delete every object store file but the pack ``keep_pack`` (and its index), and
    the reflogs; how many files went. The caller reopens the repository after."""
    removed = 0
    objects = git_dir / "objects"
    packs = objects / "pack"
    if packs.is_dir():
        with os.scandir(packs) as entries:
            stale = [e.path for e in entries if not e.name.startswith(f"{keep_pack}.")]
        for path in stale:
            os.unlink(path)
        removed += len(stale)
        fsync_dir(packs)
    with os.scandir(objects) as entries:
        loose = [
            e.path
            for e in entries
            if e.is_dir(follow_symlinks=False) and LOOSE_DIR.fullmatch(e.name)
        ]
    for path in loose:
        with os.scandir(path) as files:
            removed += sum(1 for _ in files)
        shutil.rmtree(path)
    info = objects / "info"
    for name in ("commit-graph", "commit-graphs", "multi-pack-index", "packs"):
        target = info / name
        if target.is_dir():
            shutil.rmtree(target)
        elif target.exists():
            target.unlink()
    # Reflogs name commits that are gone now (and git fsck would report them).
    logs = git_dir / "logs"
    if logs.is_dir():
        shutil.rmtree(logs)
    fsync_dir(objects)
    return removed


def compact_repository(git_dir: Path) -> None:
    """Keep only what the repository's refs reach (a bare repository on this machine:
    the published origin, a local backup remote)."""
    repo = pygit2.Repository(str(git_dir))
    name, _ = pack(repo, commit_refs(repo).values())
    repo.free()
    drop_all_but(git_dir, name)
