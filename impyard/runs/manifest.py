"""Reading and writing run manifests (atomic replace, so a crash keeps the last good state)."""

from __future__ import annotations

import json

from impyard.errors import NotFoundError
from impyard.fsutil import atomic_write_json
from impyard.home import Home
from impyard.names import RUN_ID
from impyard.runs.model import Manifest


def write(home: Home, manifest: Manifest) -> None:
    atomic_write_json(home.manifest(manifest.run_id), manifest.to_dict())


def read(home: Home, run_id: str) -> Manifest:
    path = home.manifest(run_id)
    if not RUN_ID.fullmatch(run_id) or not path.is_file():
        raise NotFoundError(f"no run {run_id!r} in {home.runs_dir}")
    return Manifest.from_dict(json.loads(path.read_text()))


def list_all(home: Home, imp: str | None = None) -> list[Manifest]:
    """Every run with a readable manifest, oldest first (run ids sort by time)."""
    if not home.runs_dir.is_dir():
        return []
    manifests = []
    for entry in sorted(home.runs_dir.iterdir()):
        if not RUN_ID.fullmatch(entry.name):
            continue
        try:
            manifest = Manifest.from_dict(json.loads((entry / "manifest.json").read_text()))
        except (OSError, ValueError, TypeError):
            continue
        if imp is None or manifest.imp == imp:
            manifests.append(manifest)
    return manifests
