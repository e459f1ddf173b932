"""Backups that inflate far past their size on disk, written by hand in a few seconds.

A pack of zeros deflates ~1,000 to 1, so a blob of 1 GiB is a pack of ~1 MB; git would take
15 s to deflate it, so the stream is built from one deflated MiB repeated (a full flush makes
each MiB a byte-aligned block that needs nothing before it). The delta form is smaller still:
a blob of 64 KiB and a delta that copies it 16,384 times. Commit and tree are in the pack
too, so no git command ever reads the bomb.
"""

from __future__ import annotations

import functools
import hashlib
import os
import struct
import subprocess
import zlib
from pathlib import Path

from tests.helpers.git import git

GIB = 1 << 30
_MIB = 1 << 20
_BASE = 1 << 16  # the delta's base: a copy op with no size bytes copies 64 KiB

_COMMIT, _TREE, _BLOB, _OFS_DELTA = 1, 2, 3, 6


def zeros_deflated(size: int) -> bytes:
    """A zlib stream that inflates to ``size`` zero bytes (a multiple of a MiB)."""
    assert size % _MIB == 0
    first = zlib.compressobj(9)
    head = first.compress(bytes(_MIB)) + first.flush(zlib.Z_FULL_FLUSH)
    block = zlib.compressobj(9)
    block.compress(bytes(_MIB))
    block.flush(zlib.Z_FULL_FLUSH)
    again = block.compress(bytes(_MIB)) + block.flush(zlib.Z_FULL_FLUSH)
    # Adler-32 of n zero bytes: the sum of bytes stays 1, the sum of sums is n.
    adler = (size % 65521) << 16 | 1
    # 0x03 0x00: a final, empty block with fixed codes.
    return head + again * (size // _MIB - 1) + b"\x03\x00" + struct.pack(">I", adler)


@functools.cache
def zeros_id(size: int) -> bytes:
    """The object id of a blob of ``size`` zero bytes."""
    digest = hashlib.sha1(b"blob %d\0" % size)
    chunk = bytes(_MIB)
    for _ in range(size // _MIB):
        digest.update(chunk)
    digest.update(bytes(size % _MIB))
    return digest.digest()


def _object_id(kind: bytes, data: bytes) -> bytes:
    return hashlib.sha1(kind + b" %d\0" % len(data) + data).digest()


def entry_header(kind: int, size: int) -> bytes:
    out = bytearray()
    byte = (kind << 4) | (size & 0x0F)
    size >>= 4
    while size:
        out.append(byte | 0x80)
        byte, size = size & 0x7F, size >> 7
    out.append(byte)
    return bytes(out)


def _ofs(distance: int) -> bytes:
    out = bytearray([distance & 0x7F])
    distance >>= 7
    while distance:
        distance -= 1
        out.insert(0, 0x80 | (distance & 0x7F))
        distance >>= 7
    return bytes(out)


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def write_pack(git_dir: Path, entries: list[tuple[bytes, bytes]]) -> None:
    """Write ``entries`` (object id, entry bytes as a pack holds them; an OFS_DELTA entry's
    base must come right before it) as one pack and its index into ``git_dir``."""
    pack = bytearray(b"PACK" + struct.pack(">II", 2, len(entries)))
    rows = []
    for oid, raw in entries:
        rows.append((oid, zlib.crc32(raw), len(pack)))
        pack += raw
    pack += hashlib.sha1(pack).digest()
    rows.sort()
    index = bytearray(b"\377tOc" + struct.pack(">I", 2))
    for first in range(256):
        index += struct.pack(">I", sum(1 for oid, _, _ in rows if oid[0] <= first))
    index += b"".join(oid for oid, _, _ in rows)
    index += b"".join(struct.pack(">I", crc) for _, crc, _ in rows)
    index += b"".join(struct.pack(">I", offset) for _, _, offset in rows)
    index += pack[-20:]
    index += hashlib.sha1(index).digest()
    name = pack[-20:].hex()
    (git_dir / "objects" / "pack" / f"pack-{name}.pack").write_bytes(pack)
    (git_dir / "objects" / "pack" / f"pack-{name}.idx").write_bytes(index)


def bomb_backup(base: Path, imp: str, size: int = GIB, *, delta: bool = False) -> str:
    """``<base>/<imp>.git`` whose main holds ``bomb.md``: ``size`` zero bytes (a multiple of
    64 KiB), deflated whole or (``delta``) as a delta on ``base.md``, 64 KiB of zeros. The
    bomb's object id."""
    git_dir = base / f"{imp}.git"
    git("init", "-q", "--bare", "-b", "main", git_dir)
    bomb = zeros_id(size)
    entries: list[tuple[bytes, bytes]] = []
    names = [(b"bomb.md", bomb)]
    if delta:
        base_id = zeros_id(_BASE)
        names.insert(0, (b"base.md", base_id))
        entries.append((base_id, entry_header(_BLOB, _BASE) + zlib.compress(bytes(_BASE))))
        ops = _varint(_BASE) + _varint(size) + b"\x80" * (size // _BASE)
        raw = entry_header(_OFS_DELTA, len(ops)) + _ofs(len(entries[0][1])) + zlib.compress(ops)
        entries.append((bomb, raw))
    else:
        entries.append((bomb, entry_header(_BLOB, size) + zeros_deflated(size)))
    tree = b"".join(b"100644 " + name + b"\0" + oid for name, oid in names)
    who = b"Test <test@example.invalid> 0 +0000"
    commit = b"tree %s\nauthor %s\ncommitter %s\n\nbomb\n" % (
        _object_id(b"tree", tree).hex().encode(),
        who,
        who,
    )
    for kind, code, data in ((b"tree", _TREE, tree), (b"commit", _COMMIT, commit)):
        raw = entry_header(code, len(data)) + zlib.compress(data)
        entries.append((_object_id(kind, data), raw))
    write_pack(git_dir, entries)
    (git_dir / "refs" / "heads" / "main").write_text(_object_id(b"commit", commit).hex() + "\n")
    return bomb.hex()


def peak_rss(argv: list[str], env: dict[str, str], out: Path) -> tuple[int, str, int]:
    """Run ``argv``; its exit code, its stderr and its peak resident set in bytes (the
    kernel's high-water mark for that one child, from wait4)."""
    with (out / "stdout").open("wb") as stdout, (out / "stderr").open("wb") as stderr:
        proc = subprocess.Popen(argv, env=env, stdout=stdout, stderr=stderr)
        _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, (out / "stderr").read_text(), usage.ru_maxrss * 1024
