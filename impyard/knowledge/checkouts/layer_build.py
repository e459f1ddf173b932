"""Building one layer: a FULL layer with the whole tree of its commit, or a DELTA layer
with only what its commit changed against the layer it stacks on.

A delta holds new/changed files, whiteouts for deletions and opaque dirs for replaced
files, so preparing the next run's base costs what the last integration changed.
Chains stay within ``chain_limit``: past that the next layer is one delta straight
on the chain's FULL layer, squashing everything since it (depth 1 again), and only
once that squashed delta would exceed ``SQUASH_LIMIT`` files is a new FULL layer
built, by hard-linking unchanged files from the old one (layers are never modified,
so sharing inodes is safe). A big FULL layer is a mounted image instead (``layer_image``).
"""

from __future__ import annotations

import itertools
import os
import shutil
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

from impyard.common.fsutil import atomic_write_json, fsync_dir
from impyard.home import Home
from impyard.knowledge.checkouts.layer_image import (
    IMAGE_NAME,
    BesideWalk,
    image_source,
    mount_image,
    write_image,
)
from impyard.knowledge.checkouts.layer_store import (
    META_FORMAT,
    TMP_PREFIX,
    Layer,
    LayerKind,
    chain_limit,
    first_parent_line,
    layer_chain,
    layer_id,
    read_layer,
)
from impyard.knowledge.checkouts.treefs import (
    CheckoutError,
    Owner,
    format_owner,
    open_dir,
    write_delta,
    write_tree,
)
from impyard.knowledge.imps import open_repo

if TYPE_CHECKING:
    import pygit2

# Git objects (pygit2, through gitobj) are imported only where a layer is built: a run
# whose base layer is ready reads layer records alone before its box starts.

# A squashed delta (every change since the chain's FULL layer) may hold this many
# files; past it a new FULL layer is cheaper to look through than a large delta.
SQUASH_LIMIT = 2000


def build_layer(
    home: Home, imp: str, commit: str, owner: Owner, beside: BesideWalk | None = None
) -> Layer:
    """Write the layer of ``commit`` for ``owner`` under a temporary name, then rename it
    into place. The caller holds ``layers_lock`` and knows the layer is missing.
    ``beside``: a walk of the same tree going on beside this build (``layer_image``)."""
    from impyard.knowledge.store.gitobj import commit_at

    repo = open_repo(home, imp)
    target = commit_at(repo, commit, CheckoutError)
    root = home.layers(imp)
    parent_layer = _nearest_ancestor_layer(home, imp, target, owner)
    tmp = root / f"{TMP_PREFIX}{layer_id(commit, owner)}-{uuid.uuid4().hex[:8]}"
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
                image = False
            else:
                image = _write_full(home, imp, repo, target.tree, parent_layer, tmp, owner, beside)
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
                "image": image,
            },
        )
        os.chmod(tmp, 0o755)
        final = root / layer_id(commit, owner)
        os.rename(tmp, final)
        fsync_dir(root)
        if image:
            mount_image(final, final / "t")
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    layer = read_layer(home, imp, layer_id(commit, owner))
    assert layer is not None
    return layer


def _write_full(
    home: Home,
    imp: str,
    repo: pygit2.Repository,
    tree: pygit2.Tree,
    parent_layer: Layer | None,
    tmp: Path,
    owner: Owner,
    beside: BesideWalk | None,
) -> bool:
    """Write a FULL layer's tree into ``tmp``: as an image when it is big and no
    directory of it too wide (True), else as files, hard-linking what is unchanged since
    the chain's FULL layer (a compaction) when that layer is files too (an image's files
    are on another filesystem)."""
    from impyard.knowledge.store.gitobj import commit_at

    source = image_source(tree, beside)
    if source is not None and write_image(repo, source, owner, tmp / IMAGE_NAME):
        fd = os.open(tmp / IMAGE_NAME, os.O_RDONLY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        return True
    full = layer_chain(home, imp, parent_layer)[-1] if parent_layer is not None else None
    link_from = None
    if full is not None and not full.image:
        link_from = (open_dir(full.tree_dir), commit_at(repo, full.commit, CheckoutError).tree)
    tree_fd = open_dir(tmp / "t")
    try:
        write_tree(repo, tree, tree_fd, owner, link_from=link_from)
    finally:
        os.close(tree_fd)
        if link_from is not None:
            os.close(link_from[0])
    return False


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
    from impyard.knowledge.store.gitobj import changed_paths, commit_at

    full = layer_chain(home, imp, parent)[-1]
    changed = changed_paths(commit_at(repo, full.commit, CheckoutError).tree, target.tree)
    if sum(1 for _ in itertools.islice(changed, SQUASH_LIMIT + 1)) > SQUASH_LIMIT:
        return None
    return full


def _nearest_ancestor_layer(
    home: Home, imp: str, target: pygit2.Commit, owner: Owner
) -> Layer | None:
    """The layer of the closest first-parent ancestor that has one (within CHAIN_CEILING steps).

    Concurrent runs land commits faster than their layers are built, so the direct
    parent's layer may not exist yet; a delta against an older ancestor's layer is just
    as correct (it is a tree-to-tree diff) and avoids rebuilding the whole tree.
    """
    for current in itertools.islice(first_parent_line(target), 1, None):
        found = read_layer(home, imp, layer_id(str(current.id), owner))
        if found is not None:
            # A 12-hex id collision: never stack on a stranger.
            return found if found.commit == str(current.id) else None
    return None
