"""Git's delta encoding, as a pack stores an object against a base it holds.

Only the one shape a lane commit makes is produced: the common prefix and suffix
of base and target copied, what lies between inserted.
"""

from __future__ import annotations

# git's own writers copy at most 64 KiB per delta instruction; readers accept more, but
# not every old one.
_MAX_COPY = 0x10000
_MAX_INSERT = 0x7F


def delta(base: bytes, target: bytes) -> bytes:
    """A git delta that makes ``target`` from ``base``: their common prefix and suffix
    copied, what lies between inserted.

    That is all a lane commit does to a tree (an entry or a few added, replaced or
    removed in one place), so a 72 KB topic tree a pass rewrites costs its new entry,
    not 72 KB, to compress, write and fsync. Finding both ends compares ever shorter
    slices: O(size), in memcmp."""
    shorter = min(len(base), len(target))
    prefix = _common_prefix(base, target, shorter)
    suffix = _common_suffix(base, target, shorter - prefix)
    out = bytearray(_size(len(base)) + _size(len(target)))
    _copy(out, 0, prefix)
    middle = target[prefix : len(target) - suffix]
    for start in range(0, len(middle), _MAX_INSERT):
        chunk = middle[start : start + _MAX_INSERT]
        out.append(len(chunk))
        out += chunk
    _copy(out, len(base) - suffix, suffix)
    return bytes(out)


def _common_prefix(a: bytes, b: bytes, limit: int) -> int:
    low, high = 0, limit  # a[:low] == b[:low]; the answer lies in [low, high]
    while low < high:
        mid = (low + high + 1) // 2
        if a[low:mid] == b[low:mid]:
            low = mid
        else:
            high = mid - 1
    return low


def _common_suffix(a: bytes, b: bytes, limit: int) -> int:
    end_a, end_b = len(a), len(b)
    low, high = 0, limit
    while low < high:
        mid = (low + high + 1) // 2
        if a[end_a - mid : end_a - low] == b[end_b - mid : end_b - low]:
            low = mid
        else:
            high = mid - 1
    return low


def _size(size: int) -> bytes:
    """A delta header size: 7 bits a byte, least significant first."""
    out = bytearray()
    while True:
        byte, size = size & 0x7F, size >> 7
        if not size:
            out.append(byte)
            return bytes(out)
        out.append(byte | 0x80)


def _copy(out: bytearray, offset: int, size: int) -> None:
    """Copy instructions for ``size`` bytes of the base from ``offset``."""
    while size > 0:
        chunk = min(size, _MAX_COPY)
        command, operands = 0x80, bytearray()
        for i in range(4):
            if byte := (offset >> (8 * i)) & 0xFF:
                command |= 1 << i
                operands.append(byte)
        if chunk != _MAX_COPY:  # no size bytes at all means 0x10000
            for i in range(3):
                if byte := (chunk >> (8 * i)) & 0xFF:
                    command |= 0x10 << i
                    operands.append(byte)
        out.append(command)
        out += operands
        offset += chunk
        size -= chunk
