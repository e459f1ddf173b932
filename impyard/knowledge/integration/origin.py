"""The published origin: a bare, read-only-to-boxes mirror of ``main`` and nothing else.

Boxes mount ``knowledge/<imp>/origin.git`` read-only; the canonical repo is never
mounted. The mirror carries only ``refs/heads/main`` (no candidate or quarantine
refs, whose content was refused), no hooks and a minimal config.

A refresh publishes what main gained since the mirror's main — O(change), found
by diffing each new commit's tree against its parent's (or, for a commit the
lane pass asking for the refresh made, taken from what it recorded making it), never by
walking the repository — and only then moves the mirror's main, so the mirror's main always
names complete history and a refresh that died halfway is simply redone.
Objects arrive three ways, cheapest first: a canonical pack whose every object
is among them is hard-linked in whole (a large run's blobs and trees, or the
commits and trees of runs the lane landed together, already durable); the rest
are written as one new pack when many or when main gained several commits at
once (a lane pass: one batch of fsyncs, not one per object), loose otherwise.
A pack holding anything else (a refused run's content) is never linked. Once many
loose objects or small packs have gathered, they are folded into one pack
(``knowledge.store.fold``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import cast

import pygit2

from impyard.common.fsutil import fsync_dir, locked
from impyard.common.names import check_imp_name
from impyard.home import Home
from impyard.knowledge.store.fold import fold_objects
from impyard.knowledge.store.gitcalls import Repository
from impyard.knowledge.store.history import Added
from impyard.knowledge.store.packfile import PackCopyError
from impyard.knowledge.store.packs import PACK_THRESHOLD, ObjectBatch, pack_dir, pack_object_ids
from impyard.knowledge.store.repo import (
    MAIN,
    TREE_MODE,
    configure_libgit2,
    main_commit,
    open_repo_at,
)

log = logging.getLogger(__name__)

_BLOB_MODES = frozenset(
    {pygit2.enums.FileMode.BLOB, pygit2.enums.FileMode.BLOB_EXECUTABLE, pygit2.enums.FileMode.LINK}
)


def publish_origin(home: Home, imp: str) -> str:
    """Bring origin.git's main up to the canonical main (under the lane lock); return its sha.

    Opened by path, not through the catalogue's ``open_repo``: the catalogue (``imps``)
    builds on this module. Callers pass an imp the catalogue lists."""
    check_imp_name(imp)
    repo = open_repo_at(home.repo(imp), f"imp {imp!r}: ")
    with locked(home.lane_lock(imp)):
        return sync_origin(repo, home.origin(imp))


def sync_origin(
    repo: pygit2.Repository, origin_path: Path, made: Mapping[str, Added] | None = None
) -> str:
    """The lock-free core: callers hold the lane lock (or own the directory, at creation).

    ``made``: what each commit the caller's lane pass made added (by commit id), so those
    commits' trees are not diffed again."""
    head = main_commit(repo)
    origin = _open_or_create(origin_path)
    target = pygit2.Oid(hex=head)
    published = _published(origin)
    if published != target:
        _publish_objects(repo, origin, target, published, made or {})
        origin.references.create(MAIN, target, force=True)
        try:
            fold_objects(origin)
        except (OSError, pygit2.GitError, PackCopyError, RuntimeError) as exc:
            # Housekeeping: the publication stands, and the next one folds again.
            log.warning("could not fold the published origin's objects: %s", exc)
    # Only main may ever be published; drop anything else that appeared.
    for name in list(origin.references):
        if name != MAIN:
            origin.references.delete(name)
    return head


def _published(origin: pygit2.Repository) -> pygit2.Oid | None:
    try:
        target = origin.lookup_reference(MAIN).target
    except (KeyError, pygit2.GitError):
        return None
    return target if isinstance(target, pygit2.Oid) else None


def _open_or_create(path: Path) -> pygit2.Repository:
    configure_libgit2()
    if path.is_dir():
        return Repository(str(path))
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
    return Repository(str(path))


def _publish_objects(
    src: pygit2.Repository,
    dst: pygit2.Repository,
    head: pygit2.Oid,
    published: pygit2.Oid | None,
    made: Mapping[str, Added],
) -> None:
    """Make every object ``head`` has and ``published`` lacks durable in ``dst``."""
    wanted, commits = _objects_since(src, head, published, made)
    remaining = _link_packs(src, dst, wanted)
    _copy_objects(src, dst, remaining, commits > 1)


def _objects_since(
    src: pygit2.Repository,
    head: pygit2.Oid,
    published: pygit2.Oid | None,
    made: Mapping[str, Added],
) -> tuple[set[bytes], int]:
    """Raw ids of the commits after ``published`` up to ``head`` and of what their trees
    add; and how many commits those are."""
    walker = src.walk(head, pygit2.enums.SortMode.TOPOLOGICAL)
    if published is not None:
        # A mirror main the canonical repo does not know: publish all of head's history.
        with contextlib.suppress(KeyError, ValueError, pygit2.GitError):
            walker.hide(published)
    found: set[bytes] = set()
    commits = 0
    for commit in walker:
        commits += 1
        found.add(commit.id.raw)
        parent = commit.parents[0].tree if commit.parents else None
        # A commit the caller's lane pass made says what it added; others are diffed.
        added = made.get(str(commit.id)) if parent is not None else None
        if added is None:
            _tree_objects(src, parent, commit.tree, found)
        else:
            found.update(added.objects)
    return found, commits


def _tree_objects(
    src: pygit2.Repository, old: pygit2.Tree | None, new: pygit2.Tree, found: set[bytes]
) -> None:
    """Add to ``found`` the trees and blobs of ``new`` that ``old`` does not hold at the same path.

    ``old`` is the parent commit's tree: either published (complete in the mirror)
    or itself being published now, so what it shares with ``new`` needs no copy.
    """
    stack: list[tuple[pygit2.Tree | None, pygit2.Tree]] = [(old, new)]
    while stack:
        before, tree = stack.pop()
        if (before is not None and before.id == tree.id) or tree.id.raw in found:
            continue
        found.add(tree.id.raw)
        prior = {entry.name: entry for entry in before} if before is not None else {}
        for entry in tree:
            was = prior.get(entry.name)
            if was is not None and was.id == entry.id:
                continue
            if entry.filemode == TREE_MODE:
                was_tree = src[was.id] if was is not None and was.filemode == TREE_MODE else None
                stack.append((_as_tree(was_tree), cast(pygit2.Tree, src[entry.id])))
            elif entry.filemode in _BLOB_MODES:
                found.add(entry.id.raw)


def _as_tree(obj: pygit2.Object | None) -> pygit2.Tree | None:
    return obj if isinstance(obj, pygit2.Tree) else None


def _link_packs(src: pygit2.Repository, dst: pygit2.Repository, wanted: set[bytes]) -> set[bytes]:
    """Hard-link into ``dst`` each canonical pack made only of wanted objects; return the rest.

    A large run's snapshot and tree packs qualify whole, so publishing them costs
    two links instead of re-reading and re-writing every object.
    """
    source, target = pack_dir(src), pack_dir(dst)
    try:
        offered = sorted(n for n in os.listdir(source) if _is_pack_index(n))
    except FileNotFoundError:
        offered = []
    remaining = set(wanted)
    if not offered or not remaining:
        return remaining
    target.mkdir(exist_ok=True)
    present = set(os.listdir(target))
    for idx_name in offered:
        if idx_name in present:
            continue  # published before: its objects pass the existence check below
        oids = pack_object_ids(source / idx_name, at_most=len(wanted))
        if not oids or not all(oid in wanted for oid in oids):
            continue
        pack_name = idx_name[: -len(".idx")] + ".pack"
        # The .pack first: a reader only looks for packs through their .idx.
        _link_or_copy(source / pack_name, target / pack_name)
        _link_or_copy(source / idx_name, target / idx_name)
        present.add(idx_name)
        remaining.difference_update(oids)
    if any(_is_pack_index(name) for name in present):
        # Also covers links an interrupted refresh made but never synced: the mirror's
        # main is about to name their objects.
        fsync_dir(target)
    return remaining


def _is_pack_index(name: str) -> bool:
    return name.startswith("pack-") and name.endswith(".idx")


def _link_or_copy(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
        return
    except FileExistsError:
        return  # packs are named by their checksum: it is the same pack
    except OSError:
        pass  # another filesystem, or links not allowed: copy instead
    fd, name = tempfile.mkstemp(prefix="tmp_pack_", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as out, source.open("rb") as inp:
            shutil.copyfileobj(inp, out)
            out.flush()
            os.fchmod(out.fileno(), 0o444)
            os.fsync(out.fileno())
        os.replace(name, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name)
        raise


def _copy_objects(
    src: pygit2.Repository, dst: pygit2.Repository, oids: set[bytes], pack: bool
) -> None:
    """Write ``oids`` (read from ``src``) into ``dst``: one pack when many (or ``pack``),
    loose when few."""
    if len(oids) < PACK_THRESHOLD:
        # Few: skip what the mirror has (in a pack, or left by an interrupted refresh).
        oids = {oid for oid in oids if not dst.odb.exists(pygit2.Oid(raw=oid))}
    # A pack of one object costs more fsyncs than the loose object.
    threshold = 2 if pack else PACK_THRESHOLD
    with ObjectBatch(dst, threshold=threshold) as batch:
        for oid in sorted(oids):
            kind, data = src.odb.read(pygit2.Oid(raw=oid))[:2]
            if batch.add(kind, data) != oid:  # pragma: no cover - would mean a corrupt source odb
                raise RuntimeError(f"object {oid.hex()} changed while copying")
        batch.write()
