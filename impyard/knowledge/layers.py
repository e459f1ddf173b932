"""Immutable overlay lower layers, one per commit, stacked as deltas on the parent's layer.

``<layers>/<id>/t`` is the lower directory; ``<layers>/<id>/meta.json`` says what it
is. A FULL layer holds the whole tree of its commit; a DELTA layer holds only what
its commit changed against its first parent (new/changed files, whiteouts for
deletions, opaque dirs for replaced files), so preparing the next run's base costs
what the last integration changed. Chains stay within ``chain_limit`` (as many
lowerdirs as one mount's option page holds for this data root, at most
``CHAIN_CEILING``): past that the next layer is one delta straight on the chain's
FULL layer, squashing everything since it (depth 1 again), and only once that
squashed delta would exceed ``SQUASH_LIMIT`` files is a new FULL layer built, by
hard-linking unchanged files from the old one (layers are never modified, so
sharing inodes is safe).

Layers are built in ``.tmp-*`` directories and renamed into place, so a crash
never leaves a half layer where a mount could use it; builders and the collector
serialize on one lock per imp, which also makes any ``.tmp-*`` found under the
lock a crash leftover.

Ids are short (12 hex of the commit + the owner) because Docker passes the whole
``lowerdir=a:b:…`` option through mount(2), whose data is limited to one page.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import uuid
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from impyard.errors import KnowledgeError
from impyard.fsutil import atomic_write_json, fsync_dir, locked
from impyard.home import Home
from impyard.knowledge.imps import open_repo
from impyard.knowledge.treefs import (
    CheckoutError,
    Owner,
    format_owner,
    open_dir,
    parse_owner,
    write_delta,
    write_tree,
)

if TYPE_CHECKING:
    import pygit2

# Git objects (pygit2) are read only where a layer is built or main's line is walked: a
# run whose base layer is ready reads layer records alone before its box starts.

# mount(2) copies its data argument into one page; Docker's local driver passes the
# whole ``o=`` string through.
MOUNT_DATA_LIMIT = 4095
# Overlay takes up to 500 lowers; past a few dozen, each lookup miss costs more than
# the rarer compactions save.
CHAIN_CEILING = 48
# A squashed delta (every change since the chain's FULL layer) may hold this many
# files; past it a new FULL layer is cheaper to look through than a large delta.
SQUASH_LIMIT = 2000
# The longest layer id: 12 hex, '-', two 10-digit ids joined by '.'.
_MAX_ID_LEN = 12 + 1 + 10 + 1 + 10
META_FORMAT = 1
_TMP_PREFIX = ".tmp-"
_TRASH_PREFIX = ".trash-"
_LOCK_NAME = ".lock"

LayerKind = Literal["full", "delta"]


@dataclass(frozen=True)
class Layer:
    id: str
    commit: str
    kind: LayerKind
    parent: str | None
    depth: int  # delta layers below this one down to its FULL layer
    owner: Owner
    path: Path  # <layers>/<id>

    @property
    def tree_dir(self) -> Path:
        """The directory overlay mounts as a lowerdir."""
        return self.path / "t"


def chain_limit(home: Home, imp: str) -> int:
    """The longest layer chain whose overlay options fit one page for this data root.

    Compaction (a new FULL layer, seconds at 100,000 records) happens once per this
    many integrations, so the longer the better; a short data root path allows more.
    """
    per_layer = len(str(home.layers(imp))) + 1 + _MAX_ID_LEN + len("/t") + len(":")
    run_dir = len(str(home.runs_dir)) + len("/run-YYYYMMDDTHHMMSSZ-0123456789/knowledge")
    fixed = len("lowerdir=,upperdir=,workdir=,redirect_dir=off,metacopy=off,index=off")
    room = MOUNT_DATA_LIMIT - fixed - 2 * run_dir
    return max(2, min(CHAIN_CEILING, room // per_layer))


def layer_id(commit: str, owner: Owner) -> str:
    return f"{commit[:12]}-{owner[0]}.{owner[1]}"


def ensure_layer(home: Home, imp: str, commit: str, owner: str | Owner) -> Layer:
    """The layer of ``commit`` for ``owner``, built if missing. Idempotent.

    Cheap when the layer exists (one small read) or when the first parent's layer
    exists (a delta of what the commit changed).
    """
    own = parse_owner(owner)
    _check_commit(commit)
    existing = read_layer(home, imp, layer_id(commit, own))
    if existing is not None and existing.commit == commit:
        return existing
    with layers_lock(home, imp):
        return ensure_layer_locked(home, imp, commit, own)


@contextlib.contextmanager
def layers_lock(home: Home, imp: str) -> Iterator[None]:
    """Serializes layer builds and collection for one imp (threads and processes)."""
    root = home.layers(imp)
    _make_layers_root(root)
    with locked(root / _LOCK_NAME):
        yield


def ensure_layer_locked(home: Home, imp: str, commit: str, owner: Owner) -> Layer:
    """``ensure_layer`` for a caller already holding ``layers_lock``."""
    _check_commit(commit)
    existing = read_layer(home, imp, layer_id(commit, owner))
    if existing is not None:
        if existing.commit != commit:
            raise CheckoutError(
                f"layer id {existing.id} is taken by commit {existing.commit}, wanted {commit}"
            )
        return existing
    _remove_temps(home.layers(imp))
    return _build(home, imp, commit, owner)


def read_layer(home: Home, imp: str, ident: str) -> Layer | None:
    """The layer ``ident`` if it is complete (has its meta), else None."""
    path = home.layers(imp) / ident
    try:
        raw = json.loads((path / "meta.json").read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise CheckoutError(f"layer {path} has an unreadable meta.json: {exc}") from exc
    try:
        return Layer(
            id=ident,
            commit=str(raw["commit"]),
            kind="full" if raw["kind"] == "full" else "delta",
            parent=None if raw["parent"] is None else str(raw["parent"]),
            depth=int(raw["depth"]),
            owner=parse_owner(str(raw["owner"])),
            path=path,
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckoutError(f"layer {path} has an invalid meta.json: {exc}") from exc


def layer_chain(home: Home, imp: str, layer: Layer) -> tuple[Layer, ...]:
    """``layer`` and every layer below it, top first, ending with a FULL layer."""
    chain = [layer]
    current = layer
    while current.parent is not None:
        below = read_layer(home, imp, current.parent)
        if below is None:
            raise CheckoutError(f"layer {current.id} needs missing layer {current.parent}")
        chain.append(below)
        current = below
        if len(chain) > CHAIN_CEILING:
            raise CheckoutError(f"layer chain of {layer.id} is longer than {CHAIN_CEILING}")
    return tuple(chain)


def list_layers(home: Home, imp: str) -> list[Layer]:
    root = home.layers(imp)
    if not root.is_dir():
        return []
    found = []
    for name in sorted(os.listdir(root)):
        if name.startswith("."):
            continue
        layer = read_layer(home, imp, name)
        if layer is not None:
            found.append(layer)
    return found


def collect_layers(
    home: Home, imp: str, keep_commits: Iterable[str], *, only: Collection[str] | None = None
) -> list[str]:
    """Remove every layer no kept chain needs (of ``only``, when given: what a gc plan
    listed); return the removed ids.

    Kept: the chains of ``keep_commits`` (any owner), of every run whose checkout
    record (``runs/<id>/checkout.json``) still exists, so a prepared but not yet
    finished run never loses its lower dirs, and of the layer nearest to ``main`` as
    read under the lock. The last one matters under concurrency: a caller's idea of
    main may be stale by the time it collects, and losing every layer near main would
    make the next run rebuild the whole tree (seconds at 100,000 records) instead of
    stacking a small delta. Also removes crash leftovers.
    """
    root = home.layers(imp)
    if not root.is_dir():
        return []
    with layers_lock(home, imp):
        _remove_temps(root)
        removed = [
            layer.id
            for layer in _unneeded_locked(home, imp, keep_commits, ())
            if only is None or layer.id in only
        ]
        for ident in removed:
            _trash_dir(root, ident)
        trash = [root / name for name in os.listdir(root) if name.startswith(_TRASH_PREFIX)]
    # Deleting a full layer unlinks every file of the tree (seconds at 100,000 records):
    # done outside the lock, so runs preparing their checkouts meanwhile never wait for it.
    for path in trash:
        shutil.rmtree(path, ignore_errors=True)
    return removed


def unneeded_layers(
    home: Home, imp: str, keep_commits: Iterable[str], *, ignore_runs: Collection[str] = ()
) -> list[Layer]:
    """What ``collect_layers`` would remove now, were the checkout records of
    ``ignore_runs`` gone (runs a gc plan drops); removes nothing."""
    if not home.layers(imp).is_dir():
        return []
    with layers_lock(home, imp):
        return _unneeded_locked(home, imp, keep_commits, ignore_runs)


def _unneeded_locked(
    home: Home, imp: str, keep_commits: Iterable[str], ignore_runs: Collection[str]
) -> list[Layer]:
    wanted = set(keep_commits)
    layers = {layer.id: layer for layer in list_layers(home, imp)}
    layered = {layer.commit for layer in layers.values()}
    wanted.update(_nearest_layered_commit(home, imp, layered))
    keep: set[str] = set(_layers_used_by_runs(home, imp, ignore_runs))
    keep.update(layer.id for layer in layers.values() if layer.commit in wanted)
    stack = list(keep)
    while stack:
        layer = layers.get(stack.pop())
        if layer is not None and layer.parent is not None and layer.parent not in keep:
            keep.add(layer.parent)
            stack.append(layer.parent)
    return [layers[ident] for ident in sorted(layers) if ident not in keep]


def _nearest_layered_commit(home: Home, imp: str, layered: set[str]) -> list[str]:
    """``main`` or its closest first-parent ancestor that has a layer (empty if none)."""
    from impyard.knowledge.gitobj import commit_at
    from impyard.knowledge.repo import main_commit

    repo = open_repo(home, imp)
    try:
        main = commit_at(repo, main_commit(repo))
    except KnowledgeError:
        return []
    for current in _first_parent_line(main):
        if str(current.id) in layered:
            return [str(current.id)]
    return []


def _first_parent_line(commit: pygit2.Commit) -> Iterator[pygit2.Commit]:
    """``commit`` and then its first-parent ancestors: at most ``CHAIN_CEILING`` + 1 commits,
    as no chain reaches further back than that."""
    current = commit
    for _ in range(CHAIN_CEILING):
        yield current
        if not current.parents:
            return
        current = current.parents[0]
    yield current


def _layers_used_by_runs(home: Home, imp: str, ignore_runs: Collection[str]) -> Iterator[str]:
    for record in home.checkout_records():
        if record.parent.name in ignore_runs:
            continue
        try:
            raw = json.loads(record.read_bytes())
        except (OSError, ValueError):
            continue
        if not isinstance(raw, dict) or raw.get("imp") != imp:
            continue
        for lower in raw.get("lowerdirs") or []:
            # lowerdirs are <layers>/<id>/t
            yield Path(str(lower)).parent.name


def _build(home: Home, imp: str, commit: str, owner: Owner) -> Layer:
    from impyard.knowledge.gitobj import commit_at

    repo = open_repo(home, imp)
    target = commit_at(repo, commit, CheckoutError)
    root = home.layers(imp)
    parent_layer = _nearest_ancestor_layer(home, imp, repo, target, owner)
    tmp = root / f"{_TMP_PREFIX}{layer_id(commit, owner)}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir(mode=0o700)
    try:
        (tmp / "t").mkdir(mode=0o755)
        os.chown(tmp / "t", *owner)
        os.chmod(tmp / "t", 0o755)
        tree_fd = open_dir(tmp / "t")
        try:
            below = _delta_base(home, imp, repo, target, parent_layer)
            if below is not None:
                below_tree = commit_at(repo, below.commit, CheckoutError).tree
                write_delta(repo, below_tree, target.tree, tree_fd, owner)
                kind: LayerKind = "delta"
                parent_id: str | None = below.id
                depth = below.depth + 1
            else:
                link_from = None
                if parent_layer is not None:
                    # Compaction: hard-link what is unchanged since the chain's FULL layer.
                    full = layer_chain(home, imp, parent_layer)[-1]
                    full_tree = commit_at(repo, full.commit, CheckoutError).tree
                    link_from = (open_dir(full.tree_dir), full_tree)
                try:
                    write_tree(repo, target.tree, tree_fd, owner, link_from=link_from)
                finally:
                    if link_from is not None:
                        os.close(link_from[0])
                kind, parent_id, depth = "full", None, 0
            os.fsync(tree_fd)
        finally:
            os.close(tree_fd)
        atomic_write_json(
            tmp / "meta.json",
            {
                "format": META_FORMAT,
                "commit": commit,
                "kind": kind,
                "parent": parent_id,
                "depth": depth,
                "owner": format_owner(owner),
            },
        )
        os.chmod(tmp, 0o755)
        final = root / layer_id(commit, owner)
        os.rename(tmp, final)
        fsync_dir(root)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    layer = read_layer(home, imp, layer_id(commit, owner))
    assert layer is not None
    return layer


def _delta_base(
    home: Home, imp: str, repo: pygit2.Repository, target: pygit2.Commit, parent: Layer | None
) -> Layer | None:
    """The layer to stack ``target``'s delta on, or None for a new FULL layer.

    The nearest ancestor's layer while the chain has room; past that, the chain's FULL
    layer itself (one delta squashing every change since it, so the chain starts
    again at depth 1) as long as that delta stays small. Only when it would not does
    a FULL layer get built: a FULL layer at 100,000 records costs seconds to link and
    seconds more to delete later, a squashed delta costs what changed.
    """
    if parent is None:
        return None
    if parent.depth + 1 < chain_limit(home, imp):
        return parent
    from impyard.knowledge.gitobj import changed_paths, commit_at

    full = layer_chain(home, imp, parent)[-1]
    changed = changed_paths(commit_at(repo, full.commit, CheckoutError).tree, target.tree)
    if sum(1 for _ in itertools.islice(changed, SQUASH_LIMIT + 1)) > SQUASH_LIMIT:
        return None
    return full


def _nearest_ancestor_layer(
    home: Home, imp: str, repo: pygit2.Repository, target: pygit2.Commit, owner: Owner
) -> Layer | None:
    """The layer of the closest first-parent ancestor that has one (within CHAIN_CEILING steps).

    Concurrent runs land commits faster than their layers are built, so the direct
    parent's layer may not exist yet; a delta against an older ancestor's layer is just
    as correct (it is a tree-to-tree diff) and avoids rebuilding the whole tree.
    """
    for current in itertools.islice(_first_parent_line(target), 1, None):
        found = read_layer(home, imp, layer_id(str(current.id), owner))
        if found is not None:
            # A 12-hex id collision: never stack on a stranger.
            return found if found.commit == str(current.id) else None
    return None


def _make_layers_root(root: Path) -> None:
    # Root-only: layer files belong to the box uid, and no host process running as
    # that uid may reach (and modify) an immutable layer.
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(root, 0o700)


def _remove_temps(root: Path) -> None:
    """Under the lock, a ``.tmp-*`` dir is a crashed build: nobody else is building."""
    for name in os.listdir(root):
        if name.startswith(_TMP_PREFIX):
            shutil.rmtree(root / name, ignore_errors=True)


def _trash_dir(root: Path, ident: str) -> None:
    # Rename only: the layer disappears at once, and a crash before the rmtree leaves
    # only trash (removed by the next collection), never a layer missing files.
    os.rename(root / ident, root / f"{_TRASH_PREFIX}{ident}-{uuid.uuid4().hex[:8]}")


def _check_commit(commit: str) -> None:
    if len(commit) != 40 or any(c not in "0123456789abcdef" for c in commit):
        raise CheckoutError(f"base commit {commit!r} is not a full lowercase hex sha")
