"""A run's final tree crossing the cluster: packed by the node agent, unpacked by the
control plane. The node is trusted no more than a box: an archive whose shape no box's
tree could have (a name that leaves the tree, an entry under a symlink, a device, a hard
link, a name twice) is refused whole with every reason; what a box could have made (a
symlink, a ``.git``) is unpacked as it is and refused by the same gate as a local box's
tree. Nothing here follows a symlink or reads a fifo."""

from __future__ import annotations

import io
import json
import os
import stat
import tarfile
from pathlib import Path, PurePosixPath
from typing import IO

from impyard.common.errors import ImpyardError

_CHUNK = 1 << 20


class TreeTooLarge(ImpyardError):
    """The tree is over the bound it may have."""


class TreeRefused(ImpyardError):
    """An archive no box's tree could produce; ``reasons`` lists every problem."""

    def __init__(self, reasons: list[str]) -> None:
        self.reasons = reasons
        super().__init__(f"the returned tree is refused: {'; '.join(reasons)}")


def pack(
    root: Path,
    out: IO[bytes],
    limit: int,
    *,
    live_repo: bool = False,
    have: dict[str, int] | None = None,
) -> int:
    """Write ``root``'s tree to ``out`` as a tar; the bytes of file content packed.

    ``live_repo``: ``root`` is a bare repository the lane may publish to meanwhile (the
    published origin). Its refs go first and then its objects, loose ones before packs:
    every object a packed ref names is packed too. A file that vanished between listing
    and reading (a temporary pack renamed, loose objects or small packs the lane folded
    into a new pack) is skipped, and the pack directory is listed again until a pass
    finds nothing new, so a folded object arrives in its new pack. ``have``: files the
    receiver holds (path → size); one of them is left out unless its size changed or it is
    a ref (objects and packs never change under their name; refs do), and those ``root``
    no longer holds are named in a last member, ``GONE``.
    """
    total = 0
    listed: set[str] = set()
    with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        entries = _walk(root, first=_REFS_FIRST if live_repo else (), live=live_repo)
        for _ in range(_PACK_PASSES):
            vanished = 0
            for rel, st in entries:
                if rel in listed:
                    continue
                listed.add(rel)
                if have is not None and _held(rel, st, have):
                    continue
                info = tarfile.TarInfo(rel)
                info.mtime = 0
                try:
                    total += _add(tar, info, root / rel, st, limit - total)
                except FileNotFoundError:
                    if not live_repo:
                        raise
                    vanished += 1
                except TreeTooLarge:
                    raise TreeTooLarge(f"the tree is over {limit:,} bytes") from None
            if not vanished:
                break
            entries = _walk(root, _PACKS, live=True)
        gone = sorted(set(have or ()) - listed)
        if gone:
            listing = json.dumps(gone).encode()
            info = tarfile.TarInfo(GONE)
            info.size, info.mtime = len(listing), 0
            tar.addfile(info, io.BytesIO(listing))
    return total


#: The last member of an update made for ``have``: the JSON list of the receiver's files
#: that ``root`` no longer holds (a repack or a purge removed them), to be deleted there.
GONE = ".impyard-gone"
#: A bare repository's names that go before its objects (``live_repo``).
_REFS_FIRST = ("HEAD", "packed-refs", "refs")
#: Where a live repository's packs are, listed again after files vanished, and how many
#: times at most (each fold is a lane pass: a second listing almost never misses).
_PACKS = "objects/pack/"
_PACK_PASSES = 8
#: Names in a bare repository that change in place (always sent, whatever ``have`` says).
_MUTABLE = ("HEAD", "packed-refs", "config", "refs/", "objects/info/", "info/")


def _held(rel: str, st: os.stat_result, have: dict[str, int]) -> bool:
    if not stat.S_ISREG(st.st_mode) or rel.startswith(_MUTABLE) or rel in _MUTABLE:
        return False
    return have.get(rel) == st.st_size


def holdings(root: Path) -> dict[str, int]:
    """The regular files under ``root`` with their sizes (what ``pack``'s ``have`` takes)."""
    if not root.is_dir():
        return {}
    return {rel: st.st_size for rel, st in _walk(root, live=True) if stat.S_ISREG(st.st_mode)}


def _add(
    tar: tarfile.TarFile, info: tarfile.TarInfo, path: Path, st: os.stat_result, room: int
) -> int:
    """Add one entry; the bytes of content it took."""
    if stat.S_ISDIR(st.st_mode):
        info.type, info.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(info)
    elif stat.S_ISLNK(st.st_mode):
        info.type, info.linkname = tarfile.SYMTYPE, os.readlink(path)
        tar.addfile(info)
    elif stat.S_ISREG(st.st_mode):
        if st.st_size > room:
            raise TreeTooLarge("the tree is over its bound")
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as handle:
            info.size = os.fstat(handle.fileno()).st_size
            info.mode = 0o755 if st.st_mode & 0o111 else 0o644
            tar.addfile(info, handle)
        return info.size
    else:  # a fifo, socket or device: its kind travels, never its content
        info.type = tarfile.FIFOTYPE if stat.S_ISFIFO(st.st_mode) else tarfile.CHRTYPE
        tar.addfile(info)
    return 0


def _walk(
    root: Path, prefix: str = "", first: tuple[str, ...] = (), *, live: bool = False
) -> list[tuple[str, os.stat_result]]:
    """Every entry under ``root`` (never through a symlink), names in ``first`` first;
    ``live``: an entry that vanished while it was listed is left out."""
    found: list[tuple[str, os.stat_result]] = []
    try:
        with os.scandir(root / prefix if prefix else root) as listing:
            entries = sorted(listing, key=lambda e: (e.name not in first, e.name))
    except FileNotFoundError:
        if not live:
            raise
        return found
    for entry in entries:
        rel = f"{prefix}{entry.name}"
        try:
            st = entry.stat(follow_symlinks=False)
        except FileNotFoundError:
            if not live:
                raise
            continue
        found.append((rel, st))
        if stat.S_ISDIR(st.st_mode):
            found += _walk(root, rel + "/", live=live)
    return found


def unpack(archive: Path, dest: Path, limit: int) -> None:
    """Unpack ``archive`` into the empty directory ``dest``, or refuse it with every reason
    (nothing is written then)."""
    with tarfile.open(archive, mode="r:") as tar:
        members = tar.getmembers()
        judge_members(members, limit)
        for member in members:
            target = dest / member.name
            if member.isdir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            if member.issym():
                os.symlink(member.linkname, target)
                continue
            source = tar.extractfile(member)
            assert source is not None, "a regular member has content"
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
            fd = os.open(target, flags, 0o755 if member.mode & 0o111 else 0o644)
            with os.fdopen(fd, "wb") as out:
                while chunk := source.read(_CHUNK):
                    out.write(chunk)


def judge(archive: Path, limit: int) -> None:
    """Refuse ``archive`` (``TreeRefused``, every reason) unless a box's tree could be it."""
    with tarfile.open(archive, mode="r:") as tar:
        judge_members(tar.getmembers(), limit)


def judge_members(members: list[tarfile.TarInfo], limit: int) -> None:
    """Refuse (``TreeRefused``, every reason) members no box's tree could have."""
    reasons: list[str] = []
    seen: set[str] = set()
    links: set[str] = set()
    total = 0
    for member in members:
        name = member.name
        shown = name[:200]
        parts = PurePosixPath(name).parts
        if (
            not name
            or "\0" in name
            or name.startswith("/")
            or any(part in ("..", ".") for part in parts)
            or name != str(PurePosixPath(name))
        ):
            reasons.append(f"{shown}: the name leaves the tree or is not plain")
            continue
        if name in seen:
            reasons.append(f"{shown}: appears twice")
        seen.add(name)
        if any("/".join(parts[:i]) in links for i in range(1, len(parts))):
            reasons.append(f"{shown}: lies under a symlink")
        if member.issym():
            links.add(name)
        elif member.isreg():
            total += member.size
        elif not member.isdir():
            reasons.append(f"{shown}: a {_kind(member)} cannot be part of a tree")
    if total > limit:
        reasons.append(f"the tree holds {total:,} bytes, over {limit:,}")
    if reasons:
        raise TreeRefused(reasons)


def _kind(member: tarfile.TarInfo) -> str:
    if member.islnk():
        return "hard link"
    if member.isfifo():
        return "fifo"
    if member.isdev():
        return "device"
    return "special file"
