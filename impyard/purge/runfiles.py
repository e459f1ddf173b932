"""What a purge does beside the repository: the published origin rebuilt, the copies
derived from the old history dropped (checkout layers, the checked-tree cache, kept
checkouts whose refs changed), and the run files a run or source purge names.

A run purge removes what the run wrote outside Git too: its box log and its fetch
receipts. A source purge removes every receipt of the source in the imp's runs, and the
archived bodies only those receipts named. (A text purge sweeps every file instead:
``datafiles``.)
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pygit2

from impyard.common.errors import UsageError
from impyard.common.fsutil import atomic_write_bytes
from impyard.gateway.provenance.archive import Archive
from impyard.home import Home
from impyard.knowledge.checkouts.layer_store import (
    delete_layer_files,
    layers_lock,
    list_layers,
    trash,
    trash_layer,
)
from impyard.knowledge.imps import open_repo
from impyard.knowledge.integration.origin import sync_origin
from impyard.knowledge.store.refnames import quarantine_ref
from impyard.purge.compact import compact_repository
from impyard.purge.datafiles import FileAction
from impyard.purge.selector import Selector
from impyard.runs.drive.space import drop_run_space
from impyard.runs.records import manifest as manifests
from impyard.runs.records.model import Manifest


def kept_checkouts(
    home: Home, imp: str, moves: dict[str, tuple[pygit2.Oid, pygit2.Oid | None]]
) -> list[Manifest]:
    """The imp's quarantined runs whose kept checkout holds what the purge removes: those
    whose quarantine ref it rewrites or deletes (a text purge's sweep finds the rest)."""
    from impyard.repair.kept import has_space

    return [
        m for m in manifests.each(home, imp) if quarantine_ref(m.run_id) in moves and has_space(m)
    ]


def layer_count(home: Home, imp: str) -> int:
    return len(list_layers(home, imp))


def not_swept(home: Home, imp: str, spaces: list[Manifest]) -> Callable[[Path], bool]:
    """What a sweep leaves alone: unfinished runs' directories (any imp's), and what the
    purge drops whole (the imp's layers and cache, the kept checkouts named), so a
    preview counts the same files as the purge."""
    skipped = {home.run_dir(m.run_id) for m in manifests.each(home) if not m.is_terminal}
    skipped |= {home.layers(imp), home.checked_trees(imp)}
    for m in spaces:
        skipped |= {home.run_space(m.run_id), home.run_space_image(m.run_id)}
    return lambda path: path in skipped


def republish(home: Home, imp: str) -> None:
    """The published origin: main brought to the new history, then compacted, so it holds
    nothing of the old one (the caller holds the lane lock)."""
    origin = home.origin(imp)
    sync_origin(open_repo(home, imp), origin)
    compact_repository(origin)


def drop_derived(home: Home, imp: str, spaces: list[Manifest]) -> None:
    """Plain copies of the old history: every checkout layer of the imp (rebuilt from the
    new main when a run needs one), the checked-tree cache, the kept checkouts named."""
    root = home.layers(imp)
    if root.is_dir():
        with layers_lock(home, imp):
            for layer in list_layers(home, imp):
                trash_layer(root, layer.id)
            for gone in trash(root):
                delete_layer_files(gone)
    home.checked_trees(imp).unlink(missing_ok=True)
    for m in spaces:
        drop_run_space(home, m)


def selected_files(home: Home, imp: str, selector: Selector, *, write: bool) -> list[FileAction]:
    """A run purge's box log and receipts; a source purge's receipts and bodies."""
    if selector.kind == "run":
        return _run_files(home, selector.value, write=write)
    if selector.kind == "source":
        return _source_files(home, imp, selector.value, write=write)
    return []


def _run_files(home: Home, run_id: str, *, write: bool) -> list[FileAction]:
    found = []
    for path in (home.box_log(run_id), home.run_receipts(run_id)):
        if path.is_file() and not path.is_symlink():
            if write:
                path.unlink()
            found.append(FileAction(_relative(home, path), "deleted", "what the run wrote"))
    return found


def _source_files(home: Home, imp: str, url: str, *, write: bool) -> list[FileAction]:
    """Each receipt of ``url`` in the imp's runs goes, and each body only it named."""
    found: list[FileAction] = []
    bodies: set[str] = set()
    other_bodies: set[str] = set()
    for m in manifests.each(home):
        path = home.run_receipts(m.run_id)
        if not path.is_file() or path.is_symlink():
            continue
        kept: list[bytes] = []
        dropped = 0
        with path.open("rb") as handle:
            for line in handle:
                record = _json(line)
                sha = str(record.get("sha256", ""))
                if m.imp == imp and record.get("url") == url:
                    dropped += 1
                    bodies.add(sha)
                else:
                    kept.append(line)
                    other_bodies.add(sha)
        if dropped:
            if write:
                atomic_write_bytes(path, b"".join(kept), 0o600)
            found.append(FileAction(_relative(home, path), "redacted", f"{dropped} receipt(s)"))
    archive = Archive(home.archive_dir)
    for sha in sorted(bodies - other_bodies):
        try:
            body = archive.object_path(sha)
        except UsageError:
            continue  # not a digest: a receipt line no body was stored under
        if body.is_file() and not body.is_symlink():
            if write:
                os.unlink(body)
            found.append(FileAction(_relative(home, body), "deleted", "the source's body"))
    if write and found and archive.root.is_dir():
        archive.recount()
    return found


def _json(line: bytes) -> dict[str, object]:
    try:
        value = json.loads(line)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _relative(home: Home, path: Path) -> str:
    return str(path.relative_to(home.root))
