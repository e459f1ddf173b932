"""The imp's canonical knowledge repository: creation, lookup and the Git plumbing around it.

Only the trusted host writes here, and only through pygit2 (never the git
CLI). Everything that touches tree objects lives in this module so the rest
of the knowledge core works with paths and ``FileState`` values.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pygit2

from impyard.errors import KnowledgeError, NotFoundError, UsageError
from impyard.fsutil import atomic_write_json, fsync_dir, locked
from impyard.home import Home
from impyard.knowledge.change import FileState
from impyard.knowledge.gitobj import lookup_entry
from impyard.knowledge.packs import PACK_THRESHOLD, ObjectBatch
from impyard.names import check_imp_name

MAIN = "refs/heads/main"
HOST_NAME = "impyard"
HOST_EMAIL = "impyard@localhost"
FILE_MODE = pygit2.enums.FileMode.BLOB
EXEC_MODE = pygit2.enums.FileMode.BLOB_EXECUTABLE
TREE_MODE = pygit2.enums.FileMode.TREE
# How many commits' tree sizes the cache remembers; bases of live runs are recent commits.
SIZE_CACHE_ENTRIES = 2048
# Largest tree object libgit2 keeps parsed in memory (a directory of ~500,000 entries).
TREE_CACHE_LIMIT = 32 << 20

# libgit2 fsyncs every object, ref and their directories it writes before returning:
# otherwise a host crash right after the lane moves main could leave main naming a
# commit whose objects never reached the disk (libgit2's default is not to sync).
pygit2.settings.enable_fsync_gitdir(True)
# libgit2 caches parsed trees only up to 4 KiB (about 60 entries), so every path lookup
# through a bigger directory (a topic of a few hundred records) re-read and re-parsed
# it: ~25 µs instead of ~0.5 µs, paid per written path by validation and the lane.
# The cache stays bounded by libgit2's total (256 MiB by default).
pygit2.settings.cache_object_limit(pygit2.enums.ObjectType.TREE, TREE_CACHE_LIMIT)

README = """\
# Knowledge of {imp}

This repository is {imp}'s durable knowledge about the world. Impyard (the
trusted host) owns it: a run works in a plain checkout and the host validates
and integrates what the run leaves behind when it exits cleanly.

## Layout

- `records/` — immutable notes, one Markdown file each. Add new ones; never
  edit or delete an existing one.
- `organization/` — indexes, topic maps and navigation. Only a reorganization
  run (`IMPYARD_KNOWLEDGE_MODE=reorganize`) may change it.
- `README.md` — this file; nobody may change it.

Nothing else may be added at the top level.

## Adding a record

Name it `records/<topic>/<slug>--<namespace>_<number>.md` where:

- `<topic>` is one directory (no nesting) and `<slug>` a short name, both
  lowercase letters, digits and `-`;
- `<namespace>` is exactly `$IMPYARD_KNOWLEDGE_NAMESPACE` (issued by the
  host for this run) and `<number>` counts 1, 2, 3, ... (no leading zeros).

Start the file with this frontmatter (`source_urls` is optional):

```
---
id: <namespace>_<number>
created_at: 2026-07-11T12:00:00Z
source_urls:
- https://example.com/report
---
```

`id` must equal the `<namespace>_<number>` of the file name and
`created_at` must be UTC. You may rewrite your own new files as often as you
like before the run ends; only the final state counts.

## What is refused

A run is rejected, with every reason listed, if it modifies or deletes an
existing record, writes under `organization/` in append mode, uses another
namespace, repeats a note id, or adds links, special files, hidden paths,
Git metadata, agent instruction files (AGENTS.md, CLAUDE.md, ...),
executable files, non-UTF-8 or oversized files, or credentials.

Cite sources by URL; files under `/tmp` vanish when the run ends and are
never durable references.
"""

RECORDS_README = """\
# records/

Immutable notes: `records/<topic>/<slug>--<namespace>_<number>.md`, each
starting with `id` / `created_at` / `source_urls` frontmatter. See ../README.md.
"""

ORGANIZATION_README = """\
# organization/

Indexes, topic maps and navigation over `records/`. Rebuilt only by
reorganization runs; append runs may not write here. See ../README.md.
"""


def host_signature() -> pygit2.Signature:
    return pygit2.Signature(HOST_NAME, HOST_EMAIL)


def imp_signature(imp: str) -> pygit2.Signature:
    return pygit2.Signature(imp, f"{imp}@impyard.local")


# --- imps ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ImpSettings:
    """Per-imp overrides of policy box.image / box.command, set at `imp create`."""

    image: str | None = None
    command: str | None = None
    agent: str | None = None  # set by `imp create --agent`, for the owner's eyes

    def as_dict(self) -> dict[str, str | None]:
        return {"image": self.image, "command": self.command, "agent": self.agent}


def imp_settings_path(home: Home, imp: str) -> Path:
    return home.imp_dir(imp) / "imp.json"


def size_cache_path(repo: pygit2.Repository) -> Path:
    """knowledge/<imp>/tree-bytes.json, beside repo.git (a cache: safe to delete)."""
    return Path(repo.path).resolve().parent / "tree-bytes.json"


def create_imp(home: Home, imp: str, settings: ImpSettings | None = None) -> Path:
    """Create knowledge/<imp>/ (repo.git, origin.git, imp.json); return the canonical repo path.

    Everything is built in a hidden sibling directory and renamed into place, so a
    crash leaves either no imp or a complete one (never a repo without main).
    """
    from impyard.knowledge.origin import sync_origin  # origin imports this module

    check_imp_name(imp)
    if not home.knowledge_dir.is_dir():
        raise UsageError(f"no Impyard data root at {home.root}: run `impyard init` first")
    final = home.imp_dir(imp)
    if final.exists():
        raise UsageError(f"imp {imp!r} already exists ({final})")
    staging = home.knowledge_dir / f".creating-{imp}-{uuid.uuid4().hex[:8]}"
    staging_home_dir = staging
    try:
        staging.mkdir()
        repo_path = staging / "repo.git"
        repo = pygit2.init_repository(str(repo_path), bare=True, initial_head="main")
        _strip_templates(repo_path)
        tree = build_tree(
            repo,
            None,
            {
                "README.md": _blob(repo, README.format(imp=imp)),
                "records/README.md": _blob(repo, RECORDS_README),
                "organization/README.md": _blob(repo, ORGANIZATION_README),
            },
            (),
        )
        sig = host_signature()
        commit = repo.create_commit(
            MAIN, sig, sig, f"Create knowledge repository for {imp}\n", tree, []
        )
        _write_size_cache_entry(
            repo, str(commit), tree_bytes_full(repo, cast(pygit2.Tree, repo[tree]))
        )
        sync_origin(repo, staging / "origin.git")
        atomic_write_json(staging / "imp.json", (settings or ImpSettings()).as_dict())
        fsync_dir(staging)
        try:
            os.rename(staging_home_dir, final)
        except OSError as exc:  # a concurrent create won the race
            raise UsageError(f"imp {imp!r} already exists ({final})") from exc
        fsync_dir(home.knowledge_dir)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return home.repo(imp)


def _blob(repo: pygit2.Repository, text: str) -> FileState:
    data = text.encode()
    return FileState(blob=str(repo.create_blob(data)), size=len(data), executable=False)


def _strip_templates(git_dir: Path) -> None:
    """No sample hooks, description or info/exclude: nothing in a repo dir that could run."""
    shutil.rmtree(git_dir / "hooks", ignore_errors=True)
    (git_dir / "hooks").mkdir()
    with contextlib.suppress(FileNotFoundError):
        (git_dir / "description").unlink()
    shutil.rmtree(git_dir / "info", ignore_errors=True)


def list_imps(home: Home) -> list[str]:
    if not home.knowledge_dir.is_dir():
        return []
    names = []
    for entry in home.knowledge_dir.iterdir():
        # Hidden staging directories and stray files never name an imp.
        if entry.name.startswith(".") or not (entry / "repo.git").is_dir():
            continue
        names.append(entry.name)
    return sorted(names)


def require_imp(home: Home, imp: str) -> Path:
    check_imp_name(imp)
    path = home.repo(imp)
    if not path.is_dir():
        raise NotFoundError(f"no imp named {imp!r} (create it with `impyard imp create {imp}`)")
    return path


def open_repo(home: Home, imp: str) -> pygit2.Repository:
    path = require_imp(home, imp)
    try:
        return pygit2.Repository(str(path))
    except pygit2.GitError as exc:
        raise KnowledgeError(f"imp {imp!r}: cannot open {path}: {exc}") from exc


def read_imp_settings(home: Home, imp: str) -> ImpSettings:
    require_imp(home, imp)
    try:
        raw: Any = json.loads(imp_settings_path(home, imp).read_text())
    except FileNotFoundError:
        return ImpSettings()
    except (OSError, ValueError) as exc:
        raise KnowledgeError(
            f"imp {imp!r}: unreadable {imp_settings_path(home, imp)}: {exc}"
        ) from exc
    if not isinstance(raw, dict):
        raise KnowledgeError(f"imp {imp!r}: {imp_settings_path(home, imp)} is not a JSON object")
    image, command, agent = raw.get("image"), raw.get("command"), raw.get("agent")
    return ImpSettings(
        image=image if isinstance(image, str) else None,
        command=command if isinstance(command, str) else None,
        agent=agent if isinstance(agent, str) else None,
    )


def main_commit(repo: pygit2.Repository) -> str:
    try:
        return str(repo.lookup_reference(MAIN).target)
    except (KeyError, pygit2.GitError) as exc:
        raise KnowledgeError(f"{repo.path}: branch main is missing") from exc


# --- trees --------------------------------------------------------------------------------


class PathConflict(KnowledgeError):
    """A path is needed both as a file and as a directory."""

    def __init__(self, path: str) -> None:
        super().__init__(f"{path}: needed both as a file and as a directory")
        self.path = path


@dataclass
class _Node:
    files: dict[str, FileState] = field(default_factory=dict)
    dirs: dict[str, _Node] = field(default_factory=dict)
    deleted: set[str] = field(default_factory=set)


def _plan(written: Mapping[str, FileState], deleted: Iterable[str]) -> _Node:
    root = _Node()
    for path, state in written.items():
        *parents, name = path.split("/")
        node = root
        for part in parents:
            node = node.dirs.setdefault(part, _Node())
        node.files[name] = state
    for path in deleted:
        *parents, name = path.split("/")
        node = root
        for part in parents:
            node = node.dirs.setdefault(part, _Node())
        node.deleted.add(name)
    return root


def build_tree(
    repo: pygit2.Repository,
    tree: pygit2.Tree | None,
    written: Mapping[str, FileState],
    deleted: Iterable[str],
) -> pygit2.Oid:
    """``tree`` with ``written`` put and ``deleted`` removed, rebuilding only the touched trees.

    Cost is proportional to the change (and to the width of the directories it
    touches), never to the repository. Directories left empty are dropped. The
    new trees are durable on return: a few are written by libgit2 one fsynced
    file each; many (a change spread over many directories) go into one pack.
    """
    plan = _plan(written, deleted)
    if _count_trees(plan) >= PACK_THRESHOLD:
        return _build_packed(repo, tree, plan)
    oid = _apply(repo, tree, plan, "")
    if oid is None:
        return repo.TreeBuilder().write()
    return oid


def _count_trees(node: _Node) -> int:
    return 1 + sum(_count_trees(child) for child in node.dirs.values())


def _apply(
    repo: pygit2.Repository, tree: pygit2.Tree | None, node: _Node, prefix: str
) -> pygit2.Oid | None:
    builder = repo.TreeBuilder(tree) if tree is not None else repo.TreeBuilder()
    for name in node.deleted:
        entry = builder.get(name)
        if entry is not None and entry.filemode != TREE_MODE:
            builder.remove(name)
    for name, child in node.dirs.items():
        entry = builder.get(name)
        subtree: pygit2.Tree | None = None
        if entry is not None:
            if entry.filemode != TREE_MODE:
                raise PathConflict(prefix + name)
            subtree = cast(pygit2.Tree, repo[entry.id])
        new = _apply(repo, subtree, child, f"{prefix}{name}/")
        if new is None:
            if entry is not None:
                builder.remove(name)
        else:
            builder.insert(name, new, TREE_MODE)
    for name, state in node.files.items():
        entry = builder.get(name)
        if entry is not None and entry.filemode == TREE_MODE:
            raise PathConflict(prefix + name)
        mode = EXEC_MODE if state.executable else FILE_MODE
        try:
            builder.insert(name, pygit2.Oid(hex=state.blob), mode)
        except (pygit2.GitError, ValueError) as exc:
            raise KnowledgeError(f"{prefix}{name}: cannot be stored in a tree: {exc}") from exc
    if len(builder) == 0:
        return None
    oid: pygit2.Oid = builder.write()
    return oid


# Tree entries as git stores them: mode (ASCII octal), name and raw id.
_TREE_MODE_BYTES = b"40000"
_FILE_MODE_BYTES = b"100644"
_EXEC_MODE_BYTES = b"100755"
_TREE = pygit2.enums.ObjectType.TREE
_BLOB = pygit2.enums.ObjectType.BLOB


def _build_packed(repo: pygit2.Repository, tree: pygit2.Tree | None, plan: _Node) -> pygit2.Oid:
    """``build_tree`` for many trees: serialized here and written as one pack.

    libgit2's TreeBuilder can only write each tree straight to the odb (an
    fsynced loose file each); this builds the same bytes in Python instead:
    same entry order, same refusals (bad names, missing blobs, file/directory
    clashes). The tests compare both ways tree for tree.
    """
    with ObjectBatch(repo) as batch:
        raw = _serialize(repo, tree.id.raw if tree is not None else None, plan, "", batch)
        if raw is None:
            raw = batch.add(_TREE, b"")
        batch.write()
    return pygit2.Oid(raw=raw)


def _serialize(
    repo: pygit2.Repository, tree: bytes | None, node: _Node, prefix: str, batch: ObjectBatch
) -> bytes | None:
    entries = _read_tree(repo, tree) if tree is not None else {}
    for name in node.deleted:
        key = name.encode("utf-8", "surrogateescape")
        entry = entries.get(key)
        if entry is not None and entry[0] != _TREE_MODE_BYTES:
            del entries[key]
    for name, child in node.dirs.items():
        key = _entry_name(prefix, name)
        entry = entries.get(key)
        subtree: bytes | None = None
        if entry is not None:
            if entry[0] != _TREE_MODE_BYTES:
                raise PathConflict(prefix + name)
            subtree = entry[1]
        new = _serialize(repo, subtree, child, f"{prefix}{name}/", batch)
        if new is None:
            entries.pop(key, None)
        else:
            entries[key] = (_TREE_MODE_BYTES, new)
    for name, state in node.files.items():
        key = _entry_name(prefix, name)
        entry = entries.get(key)
        if entry is not None and entry[0] == _TREE_MODE_BYTES:
            raise PathConflict(prefix + name)
        mode = _EXEC_MODE_BYTES if state.executable else _FILE_MODE_BYTES
        entries[key] = (mode, _stored_blob(repo, prefix + name, state.blob))
    if not entries:
        return None
    ordered = sorted(entries.items(), key=_order)
    body = b"".join(b"%s %s\0%s" % (mode, name, oid) for name, (mode, oid) in ordered)
    return batch.add(_TREE, body)


def _read_tree(repo: pygit2.Repository, oid: bytes) -> dict[bytes, tuple[bytes, bytes]]:
    """A stored tree's entries: name -> (mode, raw id), all as git wrote them."""
    data: bytes = repo.odb.read(pygit2.Oid(raw=oid))[1]
    entries: dict[bytes, tuple[bytes, bytes]] = {}
    pos, end = 0, len(data)
    while pos < end:
        space = data.index(b" ", pos)
        nul = data.index(b"\0", space)
        entries[data[space + 1 : nul]] = (data[pos:space], data[nul + 1 : nul + 21])
        pos = nul + 21
    return entries


def _order(item: tuple[bytes, tuple[bytes, bytes]]) -> bytes:
    """git's tree order: byte order of names, a directory's name read with a trailing '/'."""
    name, (mode, _) = item
    return name + b"/" if mode == _TREE_MODE_BYTES else name


def _entry_name(prefix: str, name: str) -> bytes:
    """``name`` as a tree entry, refused as libgit2's TreeBuilder refuses it (NTFS rules on)."""
    try:
        raw = name.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise KnowledgeError(f"{prefix}{name}: cannot be stored in a tree: {exc}") from exc
    # NTFS ignores trailing dots and spaces and reads "name:stream" as the file "name".
    folded = name.split(":", 1)[0].rstrip(". ").lower()
    if name in ("", ".", "..") or "/" in name or "\0" in name or folded in (".git", "git~1"):
        raise KnowledgeError(f"{prefix}{name}: cannot be stored in a tree: invalid name")
    return raw


def _stored_blob(repo: pygit2.Repository, path: str, blob: str) -> bytes:
    """The raw id of ``blob``, which must already be a blob in the odb (as TreeBuilder insists)."""
    try:
        oid = pygit2.Oid(hex=blob)
        kind = repo.odb.read_header(oid)[0]
    except (KeyError, ValueError, pygit2.GitError) as exc:
        raise KnowledgeError(f"{path}: cannot be stored in a tree: no blob {blob}") from exc
    if kind != _BLOB:
        raise KnowledgeError(f"{path}: cannot be stored in a tree: {blob} is not a blob")
    return oid.raw


# --- repository size (sum of blob sizes in a commit's tree) ---------------------------------


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


def _write_size_cache_entry(repo: pygit2.Repository, commit: str, total: int) -> None:
    path = size_cache_path(repo)
    # Own lock (not the lane lock): validate() writes here outside the lane.
    with locked(path.with_name(path.name + ".lock")):
        cache = _read_size_cache(repo)
        cache.pop(commit, None)
        cache[commit] = total  # dicts keep insertion order: newest last
        while len(cache) > SIZE_CACHE_ENTRIES:
            cache.pop(next(iter(cache)))
        atomic_write_json(path, cache)


def tree_bytes(repo: pygit2.Repository, commit: str) -> int:
    """Total blob bytes of ``commit``'s tree: cached per commit, computed by a full walk once."""
    cached = _read_size_cache(repo).get(commit)
    if cached is not None:
        return cached
    total = tree_bytes_full(repo, repo[commit].peel(pygit2.Tree))
    _write_size_cache_entry(repo, commit, total)
    return total


def record_tree_bytes(repo: pygit2.Repository, commit: str, total: int) -> None:
    _write_size_cache_entry(repo, commit, total)


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
