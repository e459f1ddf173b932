"""Immutable overlay lower layers, one per commit, stacked as deltas on the parent's layer:
ensured before a run mounts its base, collected once nothing needs them.

What a layer is on disk, its chain and its lock live in ``layer_store``; how one is
written (FULL or DELTA, squash and compaction) in ``layer_build``. This module is
their life: ``ensure_layer`` builds a missing layer under the imp's lock, and
``collect_layers`` removes those no kept chain, prepared run or ``main`` needs.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Collection, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from impyard.common.errors import KnowledgeError
from impyard.home import Home
from impyard.knowledge.checkouts.layer_build import build_layer
from impyard.knowledge.checkouts.layer_image import BesideWalk, mount_image
from impyard.knowledge.checkouts.layer_store import (
    MOUNT_DATA_LIMIT,
    Layer,
    check_commit,
    delete_layer_files,
    first_parent_line,
    layer_chain,
    layer_id,
    layers_lock,
    list_layers,
    read_layer,
    remove_temps,
    trash,
    trash_layer,
)
from impyard.knowledge.checkouts.treefs import CheckoutError, Owner, parse_owner
from impyard.knowledge.imps import open_repo

log = logging.getLogger(__name__)

# Checkout mounts a chain under this lock: the names it needs come with the entry points.
__all__ = [
    "MOUNT_DATA_LIMIT",
    "BesideWalk",
    "Layer",
    "collect_layers",
    "ensure_layer",
    "ensure_layer_locked",
    "layer_built_beside",
    "layer_chain",
    "layers_lock",
    "mounted_chain",
    "unneeded_layers",
]


def ensure_layer(
    home: Home, imp: str, commit: str, owner: str | Owner, beside: BesideWalk | None = None
) -> Layer:
    """The layer of ``commit`` for ``owner``, built if missing. Idempotent.

    Cheap when the layer exists (one small read) or when the first parent's layer
    exists (a delta of what the commit changed). ``beside``: a walk of the same tree
    going on beside the build, which a big image may wait for instead of walking it.
    """
    own = parse_owner(owner)
    check_commit(commit)
    existing = read_layer(home, imp, layer_id(commit, own))
    if existing is not None and existing.commit == commit:
        return existing
    with layers_lock(home, imp):
        return ensure_layer_locked(home, imp, commit, own, beside)


@contextmanager
def layer_built_beside(home: Home, imp: str, commit: str, owner: str) -> Iterator[BesideWalk]:
    """``ensure_layer`` in a thread while the body runs, joined on leaving it. A big
    layer's image is written by tools in their own processes, so the body's Python work
    (a walk of the same tree) goes on beside it on another core; what that walk found,
    the body says through the ``BesideWalk`` it is given (unsaid when it leaves without
    a word). A failure is left to whoever needs the layer next: it builds it again and
    says why."""
    beside = BesideWalk()
    thread = threading.Thread(
        target=_ensure_quietly, args=(home, imp, commit, owner, beside), name=f"layer-{imp}"
    )
    thread.start()
    try:
        yield beside
    finally:
        beside.unsaid()  # nothing if the body said its word: the first word counts
        thread.join()


def _ensure_quietly(home: Home, imp: str, commit: str, owner: str, beside: BesideWalk) -> None:
    try:
        ensure_layer(home, imp, commit, owner, beside)
    except Exception as exc:
        log.debug("the layer of %s for imp %s is left to its run: %s", commit, imp, exc)


def ensure_layer_locked(
    home: Home, imp: str, commit: str, owner: Owner, beside: BesideWalk | None = None
) -> Layer:
    """``ensure_layer`` for a caller already holding ``layers_lock``."""
    check_commit(commit)
    existing = read_layer(home, imp, layer_id(commit, owner))
    if existing is not None:
        if existing.commit != commit:
            raise CheckoutError(
                f"layer id {existing.id} is taken by commit {existing.commit}, wanted {commit}"
            )
        return existing
    remove_temps(home.layers(imp))
    return build_layer(home, imp, commit, owner, beside)


def mounted_chain(home: Home, imp: str, layer: Layer) -> tuple[Layer, ...]:
    """``layer_chain`` with every image layer of it mounted (after a reboot, or a mount
    that failed once): an overlay over an unmounted image would show an empty tree. The
    caller holds ``layers_lock``."""
    chain = layer_chain(home, imp, layer)
    for below in chain:
        if below.image:
            mount_image(below.path, below.tree_dir)
    return chain


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
        remove_temps(root)
        removed = [
            layer.id
            for layer in _unneeded_locked(home, imp, keep_commits, ())
            if only is None or layer.id in only
        ]
        for ident in removed:
            trash_layer(root, ident)
        doomed = trash(root)
    # Deleting a full layer unlinks every file of the tree (seconds at 100,000 records):
    # done outside the lock, so runs preparing their checkouts meanwhile never wait for it.
    for path in doomed:
        delete_layer_files(path)
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
    keep = _with_parents(layers, {ident for ident, lay in layers.items() if lay.commit in wanted})
    if len(keep) < len(layers):
        # Only now the runs' records: reading every run directory's took 10 ms at 600
        # runs and 161 ms at 10,000 (a month of them kept), after every landing, while
        # the chain of main's layer mostly holds every layer there is.
        keep = _with_parents(layers, keep | set(_layers_used_by_runs(home, imp, ignore_runs)))
    return [layers[ident] for ident in sorted(layers) if ident not in keep]


def _with_parents(layers: dict[str, Layer], keep: set[str]) -> set[str]:
    """``keep`` and every layer the chains of its layers stack on."""
    stack = list(keep)
    while stack:
        layer = layers.get(stack.pop())
        if layer is not None and layer.parent is not None and layer.parent not in keep:
            keep.add(layer.parent)
            stack.append(layer.parent)
    return keep


def _nearest_layered_commit(home: Home, imp: str, layered: set[str]) -> list[str]:
    """``main`` or its closest first-parent ancestor that has a layer (empty if none)."""
    # Git objects (pygit2) are imported only where main's line is walked: a run whose
    # base layer is ready reads layer records alone before its box starts.
    from impyard.knowledge.store.gitobj import commit_at
    from impyard.knowledge.store.repo import main_commit

    repo = open_repo(home, imp)
    try:
        main = commit_at(repo, main_commit(repo))
    except KnowledgeError:
        return []
    for current in first_parent_line(main):
        if str(current.id) in layered:
            return [str(current.id)]
    return []


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
