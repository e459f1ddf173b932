"""Reading and writing run manifests (atomic replace, so a crash keeps the last good state)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

from impyard.common.errors import NotFoundError
from impyard.common.fsutil import atomic_write_json
from impyard.common.names import RUN_ID
from impyard.home import Home
from impyard.runs.records.model import Manifest


def write(home: Home, manifest: Manifest) -> None:
    atomic_write_json(home.manifest(manifest.run_id), manifest.to_dict())


def read(home: Home, run_id: str) -> Manifest:
    path = home.manifest(run_id)
    if not RUN_ID.fullmatch(run_id) or not path.is_file():
        raise NotFoundError(f"no run {run_id!r} in {home.runs_dir}")
    return Manifest.from_dict(json.loads(path.read_text()))


def list_all(home: Home, imp: str | None = None) -> list[Manifest]:
    """Every run with a readable manifest, oldest first (run ids sort by time)."""
    return list(each(home, imp))


def each(home: Home, imp: str | None = None) -> Iterator[Manifest]:
    """``list_all`` one manifest at a time: what walks every run a data root keeps (a month
    of them, by default) holds one in memory, not all."""
    if not home.runs_dir.is_dir():
        return
    for name in sorted(entry.name for entry in os.scandir(home.runs_dir)):
        if not RUN_ID.fullmatch(name):
            continue
        try:
            manifest = Manifest.from_dict(json.loads(home.manifest(name).read_text()))
        except (OSError, ValueError, TypeError):
            continue
        if imp is None or manifest.imp == imp:
            yield manifest


def read_or_none(home: Home, run_id: str) -> Manifest | None:
    """The run's manifest, or None when it is missing or unreadable."""
    try:
        return read(home, run_id)
    except (NotFoundError, OSError, ValueError, TypeError):
        return None
