"""Each imp's published origin as this node keeps it: one copy per imp, brought up to date
before each run from the control plane, which sends only what the copy lacks (objects and
packs never change under their name; refs are always sent). Boxes mount the copy read-only,
as a local box mounts the published origin itself; an update adds objects before it moves
refs, so a box reading meanwhile sees a consistent repository, as it would locally."""

from __future__ import annotations

import json
import os
import tempfile
import threading
from pathlib import Path

from impyard.cluster.node.client import ClusterClient
from impyard.cluster.treetar import holdings, unpack
from impyard.common.fsutil import remove_tree

#: The most one origin update may carry.
_MAX_UPDATE = 1 << 30


class Origins:
    def __init__(self, root: Path) -> None:
        self.root = root
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def _lock(self, imp: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(imp, threading.Lock())

    def place(self, imp: str) -> Path:
        """Where ``imp``'s origin is kept on this node (made when missing)."""
        copy = self.root / imp
        copy.mkdir(parents=True, exist_ok=True)
        return copy

    def update(self, client: ClusterClient, run_id: str, token: str, imp: str) -> Path:
        """``imp``'s origin here, brought up to date for ``run_id``; its path."""
        with self._lock(imp):
            copy = self.place(imp)
            have = holdings(copy)
            staging = Path(tempfile.mkdtemp(prefix=".update-", dir=self.root))
            try:
                archive = staging / "origin.tar"
                client.fetch_posted(
                    f"/runs/{run_id}/origin",
                    token,
                    json.dumps({"have": have}).encode(),
                    archive,
                    _MAX_UPDATE,
                )
                files = staging / "files"
                files.mkdir()
                unpack(archive, files, _MAX_UPDATE)
                _merge(files, copy)
            finally:
                remove_tree(staging)
        return copy


def _merge(files: Path, copy: Path) -> None:
    """Move every file of the update into the copy: objects first, refs last."""
    moved: list[tuple[str, Path]] = []
    for top, _dirs, names in os.walk(files):
        for name in names:
            source = Path(top) / name
            moved.append((str(source.relative_to(files)), source))
    moved.sort(key=lambda item: (not item[0].startswith("objects/"), item[0]))
    for rel, source in moved:
        target = copy / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(source, target)
