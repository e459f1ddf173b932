"""Checkout and snapshot cost beside git doing the same work, at 10k and 100k records.

    python -m bench.checkout_bench [--root DIR] [--sizes 10000,100000]

Needs root (layers are chowned to the box user). The data root defaults to a
tmpfs (/dev/shm): the machine's /tmp is unjournaled ext4 that slows down after
many deletions (~8 µs to 80-250 µs a file); pass ``--root`` to measure elsewhere.
Prints medians (ms) and ratios; not part of the tests.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pygit2

from bench.common import remove_data_root
from impyard.home import Home
from impyard.knowledge.change import KnowledgeLimits
from impyard.knowledge.checkouts.checkout import prepare_checkout, release_checkout
from impyard.knowledge.checkouts.layer_store import chain_limit
from impyard.knowledge.checkouts.layers import ensure_layer
from impyard.knowledge.checkouts.snapshot import snapshot

IMP = "bench"
OWNER = (65532, 65532)
SIG = pygit2.Signature("Bench", "bench@example.invalid", 1_700_000_000, 0)
GIT_ENV = {
    **os.environ,
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_CONFIG_NOSYSTEM": "1",
}


def build_repo(home: Home, records: int) -> tuple[pygit2.Repository, str]:
    """A bare repo of ``records`` ~1 KB notes in 100-note topics, built with pygit2 directly."""
    path = home.repo(IMP)
    path.parent.mkdir(parents=True, exist_ok=True)
    repo = pygit2.init_repository(str(path), bare=True, initial_head="main")
    filler = ("lorem ipsum dolor sit amet " * 40)[:950]
    records_tb = repo.TreeBuilder()
    per_topic = 1000 if records >= 10_000 else 100
    for topic in range(0, records, per_topic):
        tb = repo.TreeBuilder()
        for i in range(topic, min(records, topic + per_topic)):
            body = f"---\nid: n_000000000000_{i + 1}\n---\n{filler}{i}\n".encode()
            oid = repo.odb.write(pygit2.enums.ObjectType.BLOB, body)
            tb.insert(f"note-{i}--n_000000000000_{i + 1}.md", oid, pygit2.enums.FileMode.BLOB)
        records_tb.insert(f"topic-{topic // per_topic}", tb.write(), pygit2.enums.FileMode.TREE)
    org = repo.TreeBuilder()
    org.insert("index.md", repo.create_blob(b"index\n"), pygit2.enums.FileMode.BLOB)
    root = repo.TreeBuilder()
    root.insert("README.md", repo.create_blob(b"# knowledge\n"), pygit2.enums.FileMode.BLOB)
    root.insert("records", records_tb.write(), pygit2.enums.FileMode.TREE)
    root.insert("organization", org.write(), pygit2.enums.FileMode.TREE)
    oid = repo.create_commit("refs/heads/main", SIG, SIG, "base", root.write(), [])
    return repo, str(oid)


def add_note(repo: pygit2.Repository, parent: str, n: int) -> str:
    """A one-note commit on top of ``parent`` (rebuilding only the changed path)."""
    commit = repo[parent]
    assert isinstance(commit, pygit2.Commit)
    tree = commit.tree
    records = tree["records"]
    topic = records["topic-0"]
    assert isinstance(records, pygit2.Tree) and isinstance(topic, pygit2.Tree)
    blob = repo.create_blob(f"---\nid: n_bench_{n}\n---\nnew note {n}\n".encode())
    tb = repo.TreeBuilder(topic)
    tb.insert(f"new-{n}--n_bench_{n}.md", blob, pygit2.enums.FileMode.BLOB)
    rtb = repo.TreeBuilder(records)
    rtb.insert("topic-0", tb.write(), pygit2.enums.FileMode.TREE)
    root = repo.TreeBuilder(tree)
    root.insert("records", rtb.write(), pygit2.enums.FileMode.TREE)
    oid = repo.create_commit(
        "refs/heads/main", SIG, SIG, f"note {n}", root.write(), [pygit2.Oid(hex=parent)]
    )
    return str(oid)


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000


def median(
    fn: Callable[[int], object], n: int, setup: Callable[[int], object] | None = None
) -> float:
    samples = []
    for i in range(n):
        if setup is not None:
            setup(i)
        samples.append(timed(lambda i=i: fn(i)))  # type: ignore[misc]
    return statistics.median(samples)


def disk_bytes(path: Path) -> int:
    total = 0
    for dirpath, dirs, names in os.walk(path):
        for name in [*dirs, *names]:
            total += os.lstat(Path(dirpath) / name).st_blocks * 512
    return total + os.lstat(path).st_blocks * 512


def write_note(root: Path) -> None:
    """What the box leaves in the upper dir (or the copy) after writing one note."""
    topic = root / "records" / "topic-0"
    topic.mkdir(parents=True, exist_ok=True)
    (topic / "mine--n_run_1.md").write_bytes(b"---\nid: n_run_1\n---\nhello\n")


def bench_size(root: Path, records: int, reps: int) -> list[tuple[str, float, str]]:
    home = Home(root / f"home-{records}")
    remove_data_root(home.root)
    repo, base = build_repo(home, records)
    rows: list[tuple[str, float, str]] = []

    scratch = root / f"scratch-{records}"

    def archive(i: int) -> None:
        target = scratch / f"a{i}"
        target.mkdir(parents=True)
        subprocess.run(
            f"git --git-dir={home.repo(IMP)} archive main | tar -x -C {target}",
            shell=True,
            check=True,
            env=GIT_ENV,
        )

    t_archive = median(archive, reps)
    rows.append(("git archive | tar -x", t_archive, "1.0x"))

    t_first = timed(lambda: ensure_layer(home, IMP, base, OWNER))
    rows.append(("first FULL layer (one-time)", t_first, f"{t_archive / t_first:.1f}x"))

    counter = iter(range(10**6))

    def overlay(i: int) -> None:
        prepare_checkout(home, IMP, f"o{next(counter)}", base, "overlay", OWNER)

    t_overlay = median(overlay, max(reps, 20))
    rows.append(("prepare overlay (base layer exists)", t_overlay, f"{t_archive / t_overlay:.0f}x"))

    head = base
    delta_times = []
    limit = chain_limit(home, IMP)
    for n in range(1, limit):
        head = add_note(repo, head, n)
        delta_times.append(timed(lambda h=head: ensure_layer(home, IMP, h, OWNER)))  # type: ignore[misc]
    t_delta = statistics.median(delta_times)
    rows.append(("delta layer after a one-note commit", t_delta, f"{t_archive / t_delta:.0f}x"))
    head = add_note(repo, head, limit)
    layer_holder: list[object] = []
    t_compact = timed(lambda: layer_holder.append(ensure_layer(home, IMP, head, OWNER)))
    rows.append(("compaction to FULL (hard links)", t_compact, f"{t_archive / t_compact:.1f}x"))

    def copy(i: int) -> None:
        prepare_checkout(home, IMP, f"c{next(counter)}", base, "copy", OWNER)

    t_copy = median(copy, reps)
    rows.append(("prepare copy (fallback)", t_copy, f"{t_archive / t_copy:.1f}x"))

    work = scratch / "a0"

    def write_tree(i: int) -> None:
        index = scratch / f"index-{i}"
        env = {**GIT_ENV, "GIT_INDEX_FILE": str(index)}
        git = f"git --git-dir={home.repo(IMP)} --work-tree={work}"
        subprocess.run(
            f"{git} add -A && {git} write-tree",
            shell=True,
            check=True,
            env=env,
            stdout=subprocess.DEVNULL,
        )

    write_note(work)
    t_git_snap = median(write_tree, reps)
    rows.append(("git add -A && git write-tree (fresh index)", t_git_snap, "1.0x"))

    limits = KnowledgeLimits()
    runs = {}

    def prep_overlay(i: int) -> None:
        checkout = prepare_checkout(home, IMP, f"so{i}", base, "overlay", OWNER)
        write_note(checkout.root)
        runs[i] = checkout

    t_snap_overlay = median(lambda i: snapshot(repo, runs[i], limits), max(reps, 20), prep_overlay)
    rows.append(
        ("snapshot one-note run (overlay)", t_snap_overlay, f"{t_git_snap / t_snap_overlay:.0f}x")
    )
    overlay_disk = disk_bytes(home.run_dir("so0"))

    copy_checkout = prepare_checkout(home, IMP, "sc", base, "copy", OWNER)
    write_note(copy_checkout.root)
    t_snap_copy = median(lambda i: snapshot(repo, copy_checkout, limits), reps)
    rows.append(("snapshot one-note run (copy)", t_snap_copy, f"{t_git_snap / t_snap_copy:.1f}x"))
    copy_disk = disk_bytes(home.run_dir("sc"))
    rows.append(("run dir disk, overlay (KiB)", overlay_disk / 1024, ""))
    rows.append(("run dir disk, copy (KiB)", copy_disk / 1024, ""))

    for run_id, checkout in runs.items():
        release_checkout(checkout, home.run_checkout_record(f"so{run_id}"))
    release_checkout(copy_checkout, home.run_checkout_record("sc"))
    shutil.rmtree(scratch, ignore_errors=True)
    remove_data_root(home.root)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    default_root = "/dev/shm" if Path("/dev/shm").is_dir() else None
    parser.add_argument("--root", default=default_root, help="parent of the data roots")
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("run as root: layers are chowned to the box user")
    base_dir = Path(tempfile.mkdtemp(prefix="impyard-bench-", dir=args.root))
    fs = subprocess.run(["stat", "-f", "-c", "%T", str(base_dir)], capture_output=True, text=True)
    print(f"data root: {base_dir} ({fs.stdout.strip()}); medians in ms")
    try:
        for size in (int(s) for s in args.sizes.split(",")):
            rows = bench_size(base_dir, size, args.reps)
            print(f"\n{size:,} records")
            print(f"  {'operation':<44} {'ms':>10}  ratio vs git")
            for name, value, ratio in rows:
                print(f"  {name:<44} {value:>10.1f}  {ratio}")
    finally:
        shutil.rmtree(base_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
