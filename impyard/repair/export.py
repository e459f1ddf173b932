"""Export a preserved change for repair by hand: its files as plain files, plus
``export.json`` naming what the change deletes and how each path stands against main.

Files come from the Git blobs the host stored, never from a box's checkout, and are
written as regular files (0644) into a directory this export created or found empty:
``DIR/files/<path>`` and ``DIR/export.json``.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pygit2

from impyard.common.errors import UsageError
from impyard.common.fsutil import fsync_dir
from impyard.home import Home
from impyard.knowledge.imps import open_repo
from impyard.knowledge.store.repo import main_commit
from impyard.knowledge.validation.pathnames import is_storable_path
from impyard.repair import records
from impyard.repair.compare import against_main
from impyard.repair.preserved import Kind, Preserved, find_preserved
from impyard.runs.records import manifest as manifests
from impyard.runs.records.model import RepairRecord

FILES = "files"
MANIFEST = "export.json"

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True)
class ExportResult:
    directory: Path
    document: dict[str, Any]
    record: RepairRecord

    def as_dict(self) -> dict[str, Any]:
        return {"directory": str(self.directory), **self.document}


def export(home: Home, kind: Kind, run_id: str, directory: Path) -> ExportResult:
    """Write the run's preserved change under ``directory`` (missing or empty)."""
    found = find_preserved(home, kind, run_id)
    if found.manifest is None:  # the run is gone: the journal is the only record
        result = _export(home, found, directory)
    else:
        with records.owning(home, run_id) as m:
            result = _export(home, found, directory)
            m.repairs.append(result.record)
            manifests.write(home, m)
    records.journal(home, result.record, run_id=found.run_id, imp=found.imp)
    return result


def _export(home: Home, found: Preserved, directory: Path) -> ExportResult:
    target = _empty_dir(directory)
    repo = open_repo(home, found.imp)
    document = _write(repo, found, target)
    record = records.new_record(
        "export", found.kind, found.ref, commit=found.commit, outcome="exported", detail=str(target)
    )
    return ExportResult(target, document, record)


def _write(repo: pygit2.Repository, found: Preserved, target: Path) -> dict[str, Any]:
    change = found.change(repo)
    statuses = {c.path: c.status for c in against_main(repo, change)}
    written: list[dict[str, Any]] = []
    skipped: list[str] = []
    os.mkdir(target / FILES, 0o755)
    root = os.open(target / FILES, _DIR_FLAGS)
    try:
        for path, state in sorted(change.written.items()):
            blob = repo[state.blob]
            if not is_storable_path(path) or not isinstance(blob, pygit2.Blob):
                skipped.append(path)  # never in a host-written tree; never written out
                continue
            _write_file(root, path, blob.data)
            written.append(
                {
                    "path": path,
                    "size": state.size,
                    "executable": state.executable,
                    "blob": state.blob,
                    "status": statuses.get(path),
                }
            )
    finally:
        os.close(root)
    document: dict[str, Any] = {
        "kind": found.kind,
        "run_id": found.run_id,
        "imp": found.imp,
        "ref": found.ref,
        "commit": found.commit,
        "base": found.base,
        "main": main_commit(repo),
        "reason": found.reason,
        "violations": [v.as_dict() for v in found.violations],
        "written": written,
        "deleted": [
            {"path": path, "status": statuses.get(path)} for path in sorted(change.deleted)
        ],
        "not_exported": skipped,
    }
    data = (json.dumps(document, indent=2, sort_keys=True) + "\n").encode()
    fd = os.open(target / MANIFEST, _NEW_FILE, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    fsync_dir(target)
    return document


def _empty_dir(directory: Path) -> Path:
    """``directory``, created when missing; refused when it holds anything."""
    target = directory.absolute()
    try:
        target.mkdir(parents=True, mode=0o755)
        return target
    except FileExistsError:
        pass
    except OSError as exc:
        raise UsageError(f"cannot create {target}: {exc.strerror or exc}") from exc
    if not target.is_dir():
        raise UsageError(f"{target} exists and is not a directory")
    if any(target.iterdir()):
        raise UsageError(f"{target} is not empty: export into a new or empty directory")
    return target


def _write_file(root: int, path: str, data: bytes) -> None:
    """Write ``data`` at ``path`` under ``root``: each directory opened without following
    links, the file created new (never through an existing name)."""
    *parents, name = path.split("/")
    fd = os.dup(root)
    try:
        for part in parents:
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, 0o755, dir_fd=fd)
            sub = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = sub
        out = os.open(name, _NEW_FILE, 0o644, dir_fd=fd)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(out, view) :]
        finally:
            os.close(out)
    finally:
        os.close(fd)
