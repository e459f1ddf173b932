"""Each imp's published origin as this node keeps it: one copy per imp, brought up to date
before each run from the control plane, which sends only what the copy lacks (objects and
packs never change under their name; refs are always sent) and what the origin no longer
holds (a repack or a purge removed it), which goes here too. Boxes mount the copy read-only,
as a local box mounts the published origin itself; an update adds objects before it moves
refs, so a box reading meanwhile sees a consistent repository, as it would locally.

An update is read as it arrives, each file into a flat staging directory beside the copies,
and moved into place once the whole update is in and judged: no archive is spooled, and
what the copy holds is remembered between updates rather than listed again."""

from __future__ import annotations

import contextlib
import json
import os
import tarfile
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, BinaryIO

from impyard.cluster.node.client import ClusterCallError, ClusterClient
from impyard.cluster.treetar import GONE, TreeRefused, holdings, judge_members
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
                    update = _receive(answer, staging, run_id)
                _merge(update, copy, held)
            finally:
                remove_tree(staging)
        return copy


#: The most the list of files an update deletes may take.
_MAX_GONE = 64 << 20


@dataclass
class _Update:
    #: Each file of the update in staging, with the path it goes to.
    files: list[tuple[str, Path]] = field(default_factory=list)
    #: The copy's files the origin no longer holds.
    gone: list[str] = field(default_factory=list)


def _receive(answer: BinaryIO, staging: Path, run_id: str) -> _Update:
    """Every file of the update in ``staging`` under a number, with the path it goes to;
    refused whole (``TreeRefused``) unless it is a plain tree of files and directories."""
    members: list[tarfile.TarInfo] = []
    update = _Update()
    try:
        with tarfile.open(fileobj=answer, mode="r|") as tar:
            for member in tar:
                if member.name == GONE:
                    if not member.isreg() or member.size > _MAX_GONE:
                        raise ClusterCallError(f"origin update of run {run_id}: a bad {GONE}")
                    update.gone = _gone(tar.extractfile(member), run_id)
                    members += [tarfile.TarInfo(rel) for rel in update.gone]
                    continue
                members.append(member)
                if not member.isreg():
                    continue
                source = tar.extractfile(member)
                assert source is not None, "a regular member has content"
                place = staging / str(len(update.files))
                fd = os.open(place, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
                with os.fdopen(fd, "wb") as out:
                    while chunk := source.read(_CHUNK):
                        out.write(chunk)
                update.files.append((member.name, place))
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
    return update


def _gone(listing: IO[bytes] | None, run_id: str) -> list[str]:
    try:
        gone = json.loads(listing.read() if listing is not None else b"")
    except ValueError as exc:
        raise ClusterCallError(f"origin update of run {run_id}: {GONE} is not JSON") from exc
    if not isinstance(gone, list) or not all(isinstance(rel, str) for rel in gone):
        raise ClusterCallError(f"origin update of run {run_id}: {GONE} is not a list of paths")
    return gone


def _merge(update: _Update, copy: Path, held: dict[str, int]) -> None:
    """Move every file of the update into the copy: objects first (a pack before its index,
    which is what makes git read it), refs next; then delete what the origin no longer
    holds (what still names it has moved by then, as on the control plane)."""

    def order(item: tuple[str, Path]) -> tuple[bool, bool, str]:
        rel = item[0]
        is_object = rel.startswith("objects/") and not rel.startswith("objects/info/")
        return (not is_object, rel.endswith(".idx"), rel)

    made: set[Path] = set()
    for rel, source in sorted(update.files, key=order):
        target = copy / rel
        if target.parent not in made:
            target.parent.mkdir(parents=True, exist_ok=True)
            made.add(target.parent)
        size = os.stat(source).st_size
        os.replace(source, target)
        held[rel] = size
    for rel in update.gone:
        # The copy holds only files and directories the node wrote: no link to follow.
        with contextlib.suppress(FileNotFoundError, IsADirectoryError, NotADirectoryError):
            os.unlink(copy / rel)
        held.pop(rel, None)
