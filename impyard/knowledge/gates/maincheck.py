"""Before a run is admitted: its base is a tree a checkout may write.

Main moves through the lane, which writes only entries the gate allows; anything else
that moved it (an owner's commit, a restore from before the gate) may have left a
name like ``..``, a symlink or a nest thousands of levels deep. Each run checks its base
under the checkout rules (``treegate.CHECKOUT_RULES``) before anything of the run
exists, so such an imp is refused in one line that names the problem and points at
``impyard knowledge check``, instead of failing in its checkout.

What was found is kept in ``knowledge/<imp>/checked-trees.bin``: the last base found
clean, so a run from the same main reads 96 bytes and loads no git library, and the trees
found clean with their totals, so a check after a landing reads only the trees the
landing made. A cache: torn or missing, it is rebuilt by one full check. A check that
walked main also leaves its size in the repository's size cache (``sizes``).
"""

from __future__ import annotations

import hashlib
import struct
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, NoReturn

from impyard.common.errors import KnowledgeError
from impyard.common.fsutil import atomic_write_bytes
from impyard.home import Home
from impyard.knowledge.change import KnowledgeLimits
from impyard.knowledge.checkouts.treefs import MAX_FILES

if TYPE_CHECKING:
    from impyard.knowledge.checkouts.image_archive import TreeShape
    from impyard.knowledge.gates.treegate import Totals

# pygit2 and the gate load only when main moved since the last check: a run from the
# same main starts without them, as it does without a check.

_MAGIC = b"IMPYCT1\n"
# magic, base commit (hex), its files and bytes, the body's digest, the header's digest.
_HEADER = struct.Struct("<8s40sQQ16s16s")
_ENTRY = struct.Struct("<20sQQQ")  # tree id, height, files, bytes
#: Trees remembered (the newest; 44 bytes each): every directory of an imp of 100,000
#: records in a few thousand topics, and the versions the last landings replaced.
MAX_TREES = 16_384


class UnsafeMainError(KnowledgeError):
    """The imp's main holds entries no checkout may write; no run of it is admitted."""


class _Checked(NamedTuple):
    commit: str
    files: int
    size: int
    body_digest: bytes


def check_base(home: Home, imp: str, base: str, limits: KnowledgeLimits) -> TreeShape | None:
    """Refuse (``UnsafeMainError``) when ``base``, the imp's main, is not a tree a
    checkout may write within ``limits``. Else its shape when this check read every tree
    of it (a layer's image of the same tree needs no walk of its own then), None when it
    read fewer (the last base, or trees found clean before)."""
    path = home.checked_trees(imp)
    checked = _read_header(path)
    if checked is not None and checked.commit == base:
        _within(imp, base, checked.files, checked.size, limits)
        return None
    return _check(home, imp, base, limits, path, checked)


def walks_main(home: Home, imp: str, base: str) -> bool:
    """Whether ``check_base`` of ``base`` reads main's trees (its last clean base is another)."""
    checked = _read_header(home.checked_trees(imp))
    return checked is None or checked.commit != base


def _within(imp: str, base: str, files: int, size: int, limits: KnowledgeLimits) -> None:
    if files > MAX_FILES:
        _refuse(imp, base, f"main: repo-too-large: {files} files, over {MAX_FILES}", 0)
    if size > limits.max_repo_bytes:
        _refuse(
            imp,
            base,
            f"main: repo-too-large: {size} bytes; max_repo_bytes is {limits.max_repo_bytes}",
            0,
        )


def _check(
    home: Home,
    imp: str,
    base: str,
    limits: KnowledgeLimits,
    path: Path,
    checked: _Checked | None,
) -> TreeShape | None:
    from impyard.knowledge.checkouts.image_archive import TreeShape
    from impyard.knowledge.gates.treegate import CHECKOUT_RULES, GateLimits, Problems, TreeWalk
    from impyard.knowledge.imps import open_repo
    from impyard.knowledge.store.gitobj import commit_at
    from impyard.knowledge.validation.sizes import record_tree_bytes

    repo = open_repo(home, imp)
    root = commit_at(repo, base).tree_id.raw
    known = _read_trees(path, checked)
    problems = Problems()
    walk = TreeWalk(repo, GateLimits.of(limits), problems, known=known)
    totals = walk.walk(root, "main", CHECKOUT_RULES)
    if problems or totals is None:
        lines = problems.lines() or ["main: missing-object: its tree cannot be read"]
        _refuse(imp, base, lines[0], len(problems.found) + problems.omitted - 1)
    # The newest last: trees this check relied on or found, after the ones it did not use.
    remembered = {oid: t for oid, t in known.items() if oid not in walk.reused}
    remembered.update((oid, known[oid]) for oid in walk.reused)
    remembered.update(walk.clean)
    _write(path, base, totals.files, totals.bytes, remembered)
    # A clean tree's bytes are the repository size the lane checks a run's change against
    # (its blobs, no symlink or submodule): kept, so the run's checkpoint does not walk
    # every record again (seconds at 100,000 records on a base nothing had sized).
    record_tree_bytes(repo, base, totals.bytes)
    return None if walk.reused else TreeShape(walk.executables, walk.widest)


def _refuse(imp: str, base: str, first: str, more: int) -> NoReturn:
    others = f" and {more} more" if more > 0 else ""
    raise UnsafeMainError(
        f"imp {imp!r}: main {base[:12]} holds what no checkout may write ({first}{others}); "
        f"no run starts until it is fixed: see `impyard knowledge check {imp}`"
    )


def _read_header(path: Path) -> _Checked | None:
    try:
        with path.open("rb") as handle:
            raw = handle.read(_HEADER.size)
    except OSError:
        return None
    if len(raw) != _HEADER.size:
        return None
    magic, commit, files, size, body, digest = _HEADER.unpack(raw)
    if magic != _MAGIC or hashlib.blake2b(raw[:-16], digest_size=16).digest() != digest:
        return None
    return _Checked(commit.decode("ascii", "replace"), files, size, body)


def _read_trees(path: Path, checked: _Checked | None) -> dict[bytes, Totals]:
    from impyard.knowledge.gates.treegate import Totals

    if checked is None:
        return {}
    try:
        body = path.read_bytes()[_HEADER.size :]
    except OSError:
        return {}
    if hashlib.blake2b(body, digest_size=16).digest() != checked.body_digest:
        return {}  # torn, or another writer's: start afresh
    usable = len(body) - len(body) % _ENTRY.size
    return {
        oid: Totals(height, files, size)
        for oid, height, files, size in _ENTRY.iter_unpack(body[:usable])
    }


def _write(path: Path, base: str, files: int, size: int, trees: dict[bytes, Totals]) -> None:
    kept = list(trees.items())[-MAX_TREES:]
    body = b"".join(_ENTRY.pack(oid, *totals) for oid, totals in kept)
    head = struct.pack(
        "<8s40sQQ16s",
        _MAGIC,
        base.encode("ascii"),
        files,
        size,
        hashlib.blake2b(body, digest_size=16).digest(),
    )
    digest = hashlib.blake2b(head, digest_size=16).digest()
    atomic_write_bytes(path, head + digest + body, durable=False)
