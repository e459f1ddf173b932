"""Lane benchmark: validate() and one lane integration of a one-note run, beside git itself;
then a burst of runs of one imp landing at once.

    python -m bench.lane_bench [--sizes 10000,100000] [--repeat 7]
                               [--burst 500] [--burst-records 100000]
                               [--first-run 100000]

For repositories of 10,000 and 100,000 records (~1 KB each, built directly with
pygit2), prints the median time of

- ``validate`` of a change adding one note,
- ``integrate`` (validate + lane lock + replay onto main + re-check + commit +
  compare-and-swap + origin refresh) of such a change,
- ``git add -A && git write-tree`` on a fresh index in a plain checkout of the
  same tree (what git itself needs to turn a directory into a tree),

and the ratios. Data lives under $IMPYARD_BENCH_DIR (default ~/.cache/impyard-bench),
a normal directory: the machine's /tmp slows down after many deletions.

The burst (``--burst 0`` skips it) builds a repository of ``--burst-records`` records
(``common.add_records``, in a ``common.scratch_dir``), prepares ``--burst`` one-note
changes (blobs written as a snapshot writes them), then releases one thread per
change at once and times until every ``integrate`` has returned: first with the lane
landing one run per pass (each paying a whole landing's fsyncs, as before group
commit), then grouped. Both sets
are checked: each run's commit is on main once, with its own trailers and its own
file, main is linear and ``git fsck --strict`` passes on the repository and origin.
Beside the rate: how often main moved, the packs the lane added to the repository
and the origin, and how many MB the repository's objects grew by (all of it written
and synced).

The first run (``--first-run 0`` skips it; needs Docker and root) is ``first_run``'s:
a data root whose other imp has run once and whose imp holds ``--first-run`` records and
has never run, timed from ``impyard run`` starting to its box running, then the imp's
next run the same way; once with the records loose (an imp from before folds), once
packed (as the lane's folds leave it), both in 100 directories, and once packed in one
directory (an imp that writes every note beside the others: too wide for an image, whose
tool costs the square of a directory's entries, so its layer is files).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pygit2

from bench.common import add_records, print_table, scratch_dir
from bench.first_run import first_run
from impyard.dataroot import init_home
from impyard.home import Home
from impyard.knowledge.change import Change, FileState, KnowledgeLimits
from impyard.knowledge.imps import create_imp, open_repo
from impyard.knowledge.integration import lane
from impyard.knowledge.integration.lane import LaneResult, Trailers, integrate
from impyard.knowledge.integration.origin import publish_origin
from impyard.knowledge.store.gitobj import changed_paths
from impyard.knowledge.store.repo import FILE_MODE, MAIN, TREE_MODE, host_signature, main_commit
from impyard.knowledge.validation.sizes import tree_bytes
from impyard.knowledge.validation.validate import validate

TOPICS = 100
LIMITS = KnowledgeLimits()
GIT_ENV = {**os.environ, "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}


def note_bytes(ns: str, n: int) -> bytes:
    head = f"---\nid: {ns}_{n}\ncreated_at: 2026-07-11T12:00:00Z\nsource_urls:\n"
    head += f"- https://example.com/{ns}/{n}\n---\n\n"
    return (head + f"Observation {n}. " * 60)[:1024].encode() + b"\n"


def build_repo(home: Home, records: int) -> str:
    """An imp whose main holds ``records`` notes in TOPICS topic directories."""
    create_imp(home, "bench")
    repo = open_repo(home, "bench")
    head = repo[main_commit(repo)].peel(pygit2.Commit)
    ns = "n_000000000000"
    per_topic: dict[int, pygit2.TreeBuilder] = {}
    for n in range(1, records + 1):
        topic = n % TOPICS
        builder = per_topic.setdefault(topic, repo.TreeBuilder())
        blob = repo.create_blob(note_bytes(ns, n))
        builder.insert(f"note-{n}--{ns}_{n}.md", blob, FILE_MODE)
    records_tree = repo.TreeBuilder(head.tree["records"].id)
    for topic, builder in per_topic.items():
        records_tree.insert(f"topic-{topic:03d}", builder.write(), TREE_MODE)
    root = repo.TreeBuilder(head.tree)
    root.insert("records", records_tree.write(), TREE_MODE)
    sig = host_signature()
    commit = repo.create_commit(MAIN, sig, sig, f"{records} records\n", root.write(), [head.id])
    publish_origin(home, "bench")
    tree_bytes(repo, str(commit))  # warm the size cache once, as the lane would have
    return str(commit)


def one_note_change(repo: pygit2.Repository, i: int) -> tuple[Change, str]:
    ns = f"n_{i + 1:012x}"
    data = note_bytes(ns, 1)
    path = f"records/topic-{i % TOPICS:03d}/fresh--{ns}_1.md"
    blob = repo.create_blob(data)
    return Change(written={path: FileState(str(blob), len(data), False)}), ns


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def git_write_tree(repo_path: Path, work: Path, repeat: int) -> float:
    work.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(repo_path), "archive", "main"],
        check=True,
        capture_output=True,
        env=GIT_ENV,
    )
    subprocess.run(["tar", "-x", "-C", str(work)], input=archive.stdout, check=True)
    samples = []
    index = work.parent / "fresh.index"
    env = {
        **GIT_ENV,
        "GIT_INDEX_FILE": str(index),
        "GIT_DIR": str(repo_path),
        "GIT_WORK_TREE": str(work),
    }
    for _ in range(repeat):
        index.unlink(missing_ok=True)
        start = time.perf_counter()
        subprocess.run(
            "git add -A && git write-tree",
            shell=True,
            check=True,
            env=env,
            capture_output=True,
            cwd=work,
        )
        samples.append(time.perf_counter() - start)
    return median_ms(samples)


def bench_size(root: Path, records: int, repeat: int) -> dict[str, float]:
    data = root / f"r{records}"
    shutil.rmtree(data, ignore_errors=True)
    home = Home(data / "home")
    init_home(home)
    build_start = time.perf_counter()
    build_repo(home, records)
    build_s = time.perf_counter() - build_start
    repo = open_repo(home, "bench")

    validate_samples = []
    lane_samples = []
    for i in range(repeat):
        change, ns = one_note_change(repo, 10 * i)
        base = main_commit(repo)
        t0 = time.perf_counter()
        validate(repo, base, change, namespace=ns, mode="append", limits=LIMITS)
        validate_samples.append(time.perf_counter() - t0)
        trailers = Trailers(
            imp="bench",
            run=f"run-20260711T120000Z-{i:010x}",
            task=None,
            channel=None,
            base=base,
            mode="append",
        )
        t0 = time.perf_counter()
        result = integrate(
            home,
            "bench",
            change,
            base=base,
            namespace=ns,
            mode="append",
            limits=LIMITS,
            trailers=trailers,
        )
        lane_samples.append(time.perf_counter() - t0)
        assert result.checkpoint == "integrated", result
    git_ms = git_write_tree(home.repo("bench"), data / "plain", max(3, repeat // 2))
    shutil.rmtree(data, ignore_errors=True)
    return {
        "build_s": build_s,
        "validate_ms": median_ms(validate_samples),
        "lane_ms": median_ms(lane_samples),
        "git_ms": git_ms,
    }


@dataclass
class BurstJob:
    run: str
    path: str
    change: Change
    namespace: str
    base: str


@dataclass
class Burst:
    mode: str
    seconds: float
    landed: list[LaneResult]
    main_moves: int
    packs: int
    origin_packs: int
    #: What the repository's objects grew by (packs and loose files, bytes written and synced).
    stored: int

    @property
    def rate(self) -> float:
        return len(self.landed) / self.seconds


def burst_jobs(repo: pygit2.Repository, count: int, first: int) -> list[BurstJob]:
    """One-note changes into the topics ``add_records`` fills (so each replay rebuilds a
    full-size topic tree), their blobs already written, as a snapshot leaves them."""
    base = main_commit(repo)
    jobs = []
    for i in range(first, first + count):
        ns = f"n_{0xB0000000 + i:012x}"
        data = note_bytes(ns, 1)
        path = f"records/topic-{i % TOPICS}/burst--{ns}_1.md"
        blob = repo.create_blob(data)
        change = Change(written={path: FileState(str(blob), len(data), False)})
        jobs.append(BurstJob(f"run-20260711T120000Z-{0xB000000 + i:010x}", path, change, ns, base))
    return jobs


def packs_of(git_dir: Path) -> dict[str, int]:
    """Pack file name -> bytes."""
    pack_dir = git_dir / "objects" / "pack"
    return {name: (pack_dir / name).stat().st_size for name in os.listdir(pack_dir)}


def loose_bytes(git_dir: Path) -> int:
    objects = git_dir / "objects"
    return sum(f.stat().st_size for d in objects.iterdir() if len(d.name) == 2 for f in d.iterdir())


@contextmanager
def counting_main_moves() -> Iterator[list[int]]:
    """Instrumentation only: how often the lane moves main."""
    moves = [0]
    real = lane._compare_and_swap_main

    def counted(repo: pygit2.Repository, old: str, new: pygit2.Oid) -> None:
        real(repo, old, new)
        moves[0] += 1

    lane._compare_and_swap_main = counted
    try:
        yield moves
    finally:
        lane._compare_and_swap_main = real


@contextmanager
def one_run_per_pass(enabled: bool) -> Iterator[None]:
    """Chains of one commit: every run pays the fsyncs, compare-and-swap, origin refresh
    and size-cache write of a whole landing, as before group commit (all else as now)."""
    chain = lane.MAX_CHAIN_COMMITS
    lane.MAX_CHAIN_COMMITS = 1 if enabled else chain
    try:
        yield
    finally:
        lane.MAX_CHAIN_COMMITS = chain


def run_burst(home: Home, jobs: list[BurstJob], mode: str) -> Burst:
    """Release one thread per job at once; time until every integration has returned."""
    results: list[LaneResult | BaseException | None] = [None] * len(jobs)
    start = threading.Barrier(len(jobs) + 1)

    def work(i: int) -> None:
        job = jobs[i]
        trailers = Trailers("bench", job.run, None, None, job.base, "append")
        start.wait()
        try:
            results[i] = integrate(
                home,
                "bench",
                job.change,
                base=job.base,
                namespace=job.namespace,
                mode="append",
                limits=LIMITS,
                trailers=trailers,
            )
        except BaseException as exc:
            results[i] = exc

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(jobs))]
    for thread in threads:
        thread.start()
    packs_before, origin_before = packs_of(home.repo("bench")), packs_of(home.origin("bench"))
    loose_before = loose_bytes(home.repo("bench"))
    with one_run_per_pass(mode == "one at a time"), counting_main_moves() as moves:
        start.wait()
        t0 = time.perf_counter()
        for thread in threads:
            thread.join()
        seconds = time.perf_counter() - t0
    landed = []
    for job, result in zip(jobs, results, strict=True):
        if not isinstance(result, LaneResult) or result.checkpoint != "integrated":
            raise SystemExit(f"{mode}: {job.run} did not land: {result!r}")
        landed.append(result)
    packs_after = packs_of(home.repo("bench"))
    new_packs = {name: size for name, size in packs_after.items() if name not in packs_before}
    return Burst(
        mode,
        seconds,
        landed,
        moves[0],
        sum(1 for name in new_packs if name.endswith(".idx")),
        sum(1 for name in packs_of(home.origin("bench")) if name not in origin_before) // 2,
        sum(new_packs.values()) + loose_bytes(home.repo("bench")) - loose_before,
    )


def verify_burst(home: Home, jobs: list[BurstJob], bursts: list[Burst]) -> None:
    """Each run's commit is on main exactly once, with its own trailers and only its own
    file; main is linear; git fsck --strict passes on the repository and the origin."""
    repo = open_repo(home, "bench")
    commits = [r.commit or "" for burst in bursts for r in burst.landed]
    by_run: dict[str, list[str]] = {}
    current = repo[main_commit(repo)].peel(pygit2.Commit)
    for _ in range(len(jobs)):
        if len(current.parents) != 1:
            raise SystemExit(f"main is not linear at {current.id}")
        run = current.message_trailers.get("Impyard-Run", "")
        by_run.setdefault(run, []).append(str(current.id))
        current = current.parents[0]
    for job, commit in zip(jobs, commits, strict=True):
        if by_run.get(job.run) != [commit]:
            raise SystemExit(f"{job.run}: on main as {by_run.get(job.run)}, lane said {commit}")
        landed = repo[commit].peel(pygit2.Commit)
        trailers = landed.message_trailers
        if (trailers["Impyard-Base"], trailers["Impyard-Checkpoint"]) != (job.base, "1 (exit)"):
            raise SystemExit(f"{job.run}: wrong trailers {trailers}")
        paths = list(changed_paths(landed.parents[0].tree, landed.tree))
        if paths != [job.path]:
            raise SystemExit(f"{job.run}: commit changed {paths}, not {job.path}")
    for git_dir in (home.repo("bench"), home.origin("bench")):
        fsck = subprocess.run(
            ["git", "-C", str(git_dir), "fsck", "--strict", "--no-dangling"],
            capture_output=True,
            text=True,
            env=GIT_ENV,
        )
        if fsck.returncode != 0 or "error" in fsck.stderr or "warning" in fsck.stderr:
            raise SystemExit(f"git fsck --strict {git_dir}: {fsck.stdout}{fsck.stderr}")


def bench_burst(records: int, runs: int) -> None:
    root = scratch_dir("lane-burst-")
    try:
        home = Home(root / "home")
        init_home(home)
        create_imp(home, "bench")
        build_start = time.perf_counter()
        # Packed, as the lane's folds leave a repository it grew: loose, the canonical
        # repository's backlog would be folded 256 objects a pass through the burst.
        add_records(home.repo("bench"), records, packed=True)
        publish_origin(home, "bench")
        repo = open_repo(home, "bench")
        tree_bytes(repo, main_commit(repo))  # warm the size cache once, as the lane would have
        build_s = time.perf_counter() - build_start
        bursts, jobs = [], []
        for number, mode in enumerate(("one at a time", "grouped")):
            prepared = burst_jobs(repo, runs, number * runs)
            bursts.append(run_burst(home, prepared, mode))
            jobs.extend(prepared)
        verify_burst(home, jobs, bursts)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print_table(
        f"burst: {runs} one-note runs of one imp at once, {records} records "
        f"(repo built in {build_s:.0f}s under {root.parent}; verified: one commit per run "
        "with its own trailers and file, main linear, git fsck --strict clean)",
        ["lane", "seconds", "integrations/s", "main moves", "new packs", "origin packs", "MB"],
        [
            [
                b.mode,
                f"{b.seconds:.2f}",
                f"{b.rate:.0f}",
                b.main_moves,
                b.packs,
                b.origin_packs,
                f"{b.stored / 1e6:.1f}",
            ]
            for b in bursts
        ],
    )
    print(f"grouped / one at a time: {bursts[1].rate / bursts[0].rate:.1f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--burst", type=int, default=500, help="runs in the burst (0: none)")
    parser.add_argument("--burst-records", type=int, default=100_000)
    parser.add_argument(
        "--first-run", type=int, default=100_000, help="records of the cold imp (0: none)"
    )
    args = parser.parse_args()
    root = Path(os.environ.get("IMPYARD_BENCH_DIR", Path.home() / ".cache/impyard-bench"))
    root.mkdir(parents=True, exist_ok=True)
    print(f"data under {root} (medians of {args.repeat})")
    header = (
        f"{'records':>8} {'validate':>10} {'lane':>10} {'git add+write-tree':>19} "
        f"{'git/validate':>13} {'git/lane':>9}"
    )
    print(header)
    for size in (int(s) for s in args.sizes.split(",") if s):
        r = bench_size(root, size, args.repeat)
        print(
            f"{size:>8} {r['validate_ms']:>8.2f}ms {r['lane_ms']:>8.2f}ms "
            f"{r['git_ms']:>17.1f}ms {r['git_ms'] / r['validate_ms']:>12.0f}x "
            f"{r['git_ms'] / r['lane_ms']:>8.0f}x   (repo built in {r['build_s']:.1f}s)"
        )
    if args.burst:
        bench_burst(args.burst_records, args.burst)
    if args.first_run:
        rows = []
        for records, topics in (("loose", 100), ("packed", 100), ("packed", 1)):
            cold = first_run(args.first_run, packed=records == "packed", topics=topics)
            where = "in one directory" if topics == 1 else f"in {topics} directories"
            rows += [
                [
                    f"first (cold, records {records} {where})",
                    f"{cold.first_s:.2f}",
                    f"{cold.prepare_ms:.0f}",
                    f"{cold.total_ms:.0f}",
                    f"{cold.setup_s:.0f}",
                ],
                ["next", f"{cold.next_s:.2f}", "", "", ""],
            ]
        print_table(
            f"first run of a cold imp of {args.first_run} records: "
            "from `impyard run` starting to its box running",
            ["run", "to box running s", "prepare ms", "whole run ms", "set up s"],
            rows,
        )


if __name__ == "__main__":
    main()
