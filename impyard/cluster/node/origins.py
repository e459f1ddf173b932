"""Each imp's published origin as this node keeps it: one copy per imp, brought up to date
before each run from the control plane, which sends only what the copy lacks (objects and
packs never change under their name; refs are always sent). Boxes mount the copy read-only,
as a local box mounts the published origin itself; an update adds objects before it moves
refs, so a box reading meanwhile sees a consistent repository, as it would locally.

An update is read as it arrives, each file into a flat staging directory beside the copies,
and moved into place once the whole update is in and judged: no archive is spooled, and
what the copy holds is remembered between updates rather than listed again."""

from __future__ import annotations

import json
import os
import tarfile
import tempfile
import threading
from pathlib import Path
from typing import BinaryIO

from impyard.cluster.node.client import ClusterCallError, ClusterClient
from impyard.cluster.treetar import TreeRefused, holdings, judge_members
from impyard.common.fsutil import remove_tree

#: The most one origin update may carry.
_MAX_UPDATE = 1 << 30
_CHUNK = 1 << 20


class Origins:
    def __init__(self, root: Path) -> None:
        self.root = root
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()
        #: What each imp's copy holds (path → size), known since its first update here.
        self._held: dict[str, dict[str, int]] = {}

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
            held = self._held.get(imp)
            if held is None:
                held = self._held[imp] = holdings(copy)
            staging = Path(tempfile.mkdtemp(prefix=".update-", dir=self.root))
            try:
                asked = json.dumps({"have": held}).encode()
                path = f"/runs/{run_id}/origin"
                with client.answer("POST", path, token, asked, _MAX_UPDATE) as answer:
                    received = _receive(answer, staging, run_id)
                _merge(received, copy, held)
            finally:
                remove_tree(staging)
        return copy


def _receive(answer: BinaryIO, staging: Path, run_id: str) -> list[tuple[str, Path]]:
    """Every file of the update in ``staging`` under a number, with the path it goes to;
    refused whole (``TreeRefused``) unless it is a plain tree of files and directories."""
    members: list[tarfile.TarInfo] = []
    files: list[tuple[str, Path]] = []
    try:
        with tarfile.open(fileobj=answer, mode="r|") as tar:
            for member in tar:
                members.append(member)
                if not member.isreg():
                    continue
                source = tar.extractfile(member)
                assert source is not None, "a regular member has content"
                place = staging / str(len(files))
                fd = os.open(place, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
                with os.fdopen(fd, "wb") as out:
                    while chunk := source.read(_CHUNK):
                        out.write(chunk)
                files.append((member.name, place))
    except tarfile.TarError as exc:
        why = f"origin update of run {run_id} is not a whole archive: {exc}"
        raise ClusterCallError(why) from exc
    reasons = [
        f"{m.name[:200]}: an origin holds only files and directories"
        for m in members
        if not (m.isreg() or m.isdir())
    ]
    try:
        judge_members(members, _MAX_UPDATE)
    except TreeRefused as exc:
        reasons = exc.reasons + reasons
    if reasons:
        raise TreeRefused(reasons)
    return files


def _merge(files: list[tuple[str, Path]], copy: Path, held: dict[str, int]) -> None:
    """Move every file of the update into the copy: objects first (a pack before its index,
    which is what makes git read it), refs last."""

    def order(item: tuple[str, Path]) -> tuple[bool, bool, str]:
        rel = item[0]
        is_object = rel.startswith("objects/") and not rel.startswith("objects/info/")
        return (not is_object, rel.endswith(".idx"), rel)

    made: set[Path] = set()
    for rel, source in sorted(files, key=order):
        target = copy / rel
        if target.parent not in made:
            target.parent.mkdir(parents=True, exist_ok=True)
            made.add(target.parent)
        size = os.stat(source).st_size
        os.replace(source, target)
        held[rel] = size
