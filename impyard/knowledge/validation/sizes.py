"""Repository size: the sum of blob sizes in a commit's tree, cached per commit beside
the repository so a check costs O(change), not a walk of 100,000 records."""

from __future__ import annotations

import functools
import json
import os
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import cast

import pygit2

from impyard.common.fsutil import atomic_write_bytes, locked
from impyard.knowledge.change import FileState
from impyard.knowledge.store.gitobj import lookup_entry
from impyard.knowledge.store.repo import TREE_MODE

# How many commits' tree sizes the cache remembers; bases of live runs are recent commits.
# Each imp's file is parsed again after every change to it, so its length is also what
# serve holds and re-allocates per imp.
SIZE_CACHE_ENTRIES = 256


def size_cache_path(repo: pygit2.Repository) -> Path:
    """knowledge/<imp>/tree-bytes.json, beside repo.git (a cache: safe to delete)."""
    return _cache_file(repo.path)


@functools.lru_cache(maxsize=1024)
def _cache_file(repo_path: str) -> Path:
    return Path(repo_path).resolve().parent / "tree-bytes.json"


def tree_bytes_full(repo: pygit2.Repository, tree: pygit2.Tree) -> int:
    """Walk the whole tree once: O(repo). Used only when the cache has no entry."""
    total = 0
    stack = [tree]
    while stack:
        current = stack.pop()
        for entry in current:
            if entry.filemode == TREE_MODE:
                stack.append(cast(pygit2.Tree, repo[entry.id]))
            elif entry.type_str == "blob":
                total += repo.odb.read_header(entry.id)[1]
    return total


def _read_size_cache(repo: pygit2.Repository) -> dict[str, int]:
    try:
        raw = json.loads(size_cache_path(repo).read_text())
    except (OSError, ValueError):
        return {}  # missing or torn: it is only a cache
    if not isinstance(raw, dict):
        return {}
    return {k: v for k, v in raw.items() if isinstance(k, str) and isinstance(v, int)}


# Each cache file as last parsed, by the file's identity (inode, size, mtime): every
# validation asks for its base's total, and parsing the file each time cost up to ~1 ms.
# A stale parse can only lack entries (every entry is a fact about an immutable commit).
_parsed: dict[Path, tuple[tuple[int, int, int], dict[str, int]]] = {}
_parsed_lock = threading.Lock()


def _known_totals(repo: pygit2.Repository) -> Mapping[str, int]:
    path = size_cache_path(repo)
    try:
        stat = os.stat(path)
    except OSError:
        return {}
    stamp = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
    with _parsed_lock:
        known = _parsed.get(path)
    if known is not None and known[0] == stamp:
        return known[1]
    totals = _read_size_cache(repo)
    with _parsed_lock:
        _parsed[path] = (stamp, totals)
    return totals


def write_size_cache_entry(repo: pygit2.Repository, commit: str, total: int) -> None:
    path = size_cache_path(repo)
    # Own lock (not the lane lock): validate() writes here outside the lane.
    with locked(path.with_name(path.name + ".lock")):
        cache = _read_size_cache(repo)
        cache.pop(commit, None)
        cache[commit] = total  # dicts keep insertion order: newest last
        while len(cache) > SIZE_CACHE_ENTRIES:
            cache.pop(next(iter(cache)))
        # In insertion order (not sorted: the oldest entry goes first), and not synced: a
        # crash that loses or tears the cache costs one tree walk, never a wrong size.
        atomic_write_bytes(path, json.dumps(cache).encode(), durable=False)


def tree_bytes(repo: pygit2.Repository, commit: str) -> int:
    """Total blob bytes of ``commit``'s tree: cached per commit, computed by a full walk once."""
    cached = _known_totals(repo).get(commit)
    if cached is not None:
        return cached
    total = tree_bytes_full(repo, repo[commit].peel(pygit2.Tree))
    write_size_cache_entry(repo, commit, total)
    return total


def record_tree_bytes(repo: pygit2.Repository, commit: str, total: int) -> None:
    write_size_cache_entry(repo, commit, total)


def blob_size(repo: pygit2.Repository, oid: pygit2.Oid | str) -> int:
    return int(repo.odb.read_header(oid if isinstance(oid, pygit2.Oid) else pygit2.Oid(hex=oid))[1])


def size_delta(
    repo: pygit2.Repository,
    tree: pygit2.Tree,
    written: Mapping[str, FileState],
    deleted: Iterable[str],
) -> int:
    """Bytes the repo grows by when ``written``/``deleted`` are applied to ``tree``: O(change)."""
    delta = 0
    for path, state in written.items():
        delta += state.size
        old = lookup_entry(tree, path)
        if old is not None and old.type_str == "blob":
            delta -= blob_size(repo, old.id)
    for path in deleted:
        if path in written:
            continue
        old = lookup_entry(tree, path)
        if old is not None and old.type_str == "blob":
            delta -= blob_size(repo, old.id)
    return delta
