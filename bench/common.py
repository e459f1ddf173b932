"""Shared bench helpers: data roots off the machine's slow /tmp, medians, tables."""

from __future__ import annotations

import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pygit2

BENCH_DIR = Path(os.environ.get("IMPYARD_BENCH_DIR", "/var/tmp"))
ROOT = Path(__file__).resolve().parent.parent


def scratch_dir(prefix: str) -> Path:
    """A data root on a journaled filesystem: this machine kind's /tmp is ext4 without a
    journal, where creating files slows ten-fold after many deletions."""
    BENCH_DIR.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=prefix, dir=BENCH_DIR))


def remove_data_root(root: Path) -> None:
    """Delete a scratch data root, its imps' layer images unmounted first (a big imp's
    FULL layer is a mounted image, which a plain rmtree cannot delete)."""
    from impyard.home import Home
    from impyard.knowledge.checkouts.layer_image import unmount_images

    home = Home(root)
    if home.knowledge_dir.is_dir():
        for imp in os.listdir(home.knowledge_dir):
            unmount_images(home.layers(imp))
    shutil.rmtree(root, ignore_errors=True)


def byte_compiled() -> None:
    """Byte-compile the package first, as an install does: where PYTHONDONTWRITEBYTECODE
    is set (this machine kind sets it), an edited module would otherwise be compiled
    again by every command the bench times."""
    import compileall

    compileall.compile_dir(str(ROOT / "impyard"), quiet=1)


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000


def median(samples: list[float]) -> float:
    return statistics.median(samples)


def impyard(
    home: Path, *args: str, check: bool = True, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(Path(sys.executable).parent / "impyard"), "--home", str(home), *args],
        capture_output=True,
        text=True,
        check=check,
        env={**os.environ, **env} if env else None,
    )


def add_records(repo_path: Path, count: int, topics: int = 100, *, packed: bool = False) -> str:
    """Commit ``count`` ~1 KB records onto main with pygit2 directly; returns the commit.
    ``packed``: the records' blobs in one pack (a repository the lane has been folding),
    not loose (one written outside the lane, or before folds).

    Fixture data, not a measurement: written without the per-object fsync Impyard turns
    on for its own writes (100,000 synced blobs take minutes), then synced once."""
    pygit2.settings.enable_fsync_gitdir(False)
    try:
        return _add_records(repo_path, count, topics, packed)
    finally:
        pygit2.settings.enable_fsync_gitdir(True)
        os.sync()


def _record(i: int, body: bytes) -> tuple[str, bytes]:
    namespace = f"n_{i // 1000:012x}"
    text = (
        f"---\nid: {namespace}_{i % 1000 + 1}\ncreated_at: 2026-01-01T00:00:00Z\n---\n"
    ).encode() + body
    return f"note-{i}--{namespace}_{i % 1000 + 1}.md", text


def _add_records(repo_path: Path, count: int, topics: int, packed: bool) -> str:
    from impyard.knowledge.store.packs import ObjectBatch

    repo = pygit2.Repository(str(repo_path))
    head = repo.references["refs/heads/main"].peel(pygit2.Commit)
    body = ("lorem ipsum dolor sit amet " * 40).encode()
    blobs: list[pygit2.Oid] = []
    if packed:
        with ObjectBatch(repo) as batch:
            for i in range(count):
                raw = batch.add(pygit2.enums.ObjectType.BLOB, _record(i, body)[1])
                blobs.append(pygit2.Oid(raw=raw))
            batch.write()
    per_topic: dict[int, pygit2.TreeBuilder] = {}
    for i in range(count):
        topic = i % topics
        builder = per_topic.get(topic)
        if builder is None:
            builder = per_topic[topic] = repo.TreeBuilder()
        name, text = _record(i, body)
        blob = blobs[i] if packed else repo.create_blob(text)
        builder.insert(name, blob, pygit2.GIT_FILEMODE_BLOB)
    records = repo.TreeBuilder(head.tree["records"].id)
    for topic, builder in per_topic.items():
        records.insert(f"topic-{topic}", builder.write(), pygit2.GIT_FILEMODE_TREE)
    root = repo.TreeBuilder(head.tree)
    root.insert("records", records.write(), pygit2.GIT_FILEMODE_TREE)
    signature = pygit2.Signature("bench", "bench@localhost")
    oid = repo.create_commit(
        "refs/heads/main", signature, signature, f"bench: {count} records", root.write(), [head.id]
    )
    return str(oid)


def print_table(title: str, header: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    print(f"\n## {title}")
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=False)]
    for row in (header, *rows):
        print("  ".join(str(x).rjust(w) for x, w in zip(row, widths, strict=False)))


def percentile(samples: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile (``fraction`` 0.99 is p99): always one of the samples, so a
    p99 of 200 latencies is the second slowest, never an interpolation."""
    ordered = sorted(samples)
    # Rounded first: 0.99 * 200 is 198.00000000000003 in floating point.
    rank = math.ceil(round(fraction * len(ordered), 9))
    return ordered[min(max(rank, 1), len(ordered)) - 1]
