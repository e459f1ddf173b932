"""Lane benchmark: validate() and one lane integration of a one-note run, beside git itself.

    python -m bench.lane_bench [--sizes 10000,100000] [--repeat 7]

For repositories of 10,000 and 100,000 records (~1 KB each, built directly with
pygit2), prints the median time of

- ``validate`` of a change adding one note,
- ``integrate`` (validate + lane lock + replay onto main + re-check + commit +
  compare-and-swap + origin refresh) of such a change,
- ``git add -A && git write-tree`` on a fresh index in a plain checkout of the
  same tree (what git itself needs to turn a directory into a tree),

and the ratios. Data lives under $IMPYARD_BENCH_DIR (default ~/.cache/impyard-bench),
a normal directory: the machine's /tmp slows down after many deletions.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import time
from pathlib import Path

import pygit2

from impyard.home import Home, init_home
from impyard.knowledge.change import Change, FileState, KnowledgeLimits
from impyard.knowledge.imps import create_imp, open_repo
from impyard.knowledge.lane import Trailers, integrate
from impyard.knowledge.origin import publish_origin
from impyard.knowledge.repo import FILE_MODE, MAIN, TREE_MODE, host_signature, main_commit
from impyard.knowledge.sizes import tree_bytes
from impyard.knowledge.validate import validate

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    root = Path(os.environ.get("IMPYARD_BENCH_DIR", Path.home() / ".cache/impyard-bench"))
    root.mkdir(parents=True, exist_ok=True)
    print(f"data under {root} (medians of {args.repeat})")
    header = (
        f"{'records':>8} {'validate':>10} {'lane':>10} {'git add+write-tree':>19} "
        f"{'git/validate':>13} {'git/lane':>9}"
    )
    print(header)
    for size in (int(s) for s in args.sizes.split(",")):
        r = bench_size(root, size, args.repeat)
        print(
            f"{size:>8} {r['validate_ms']:>8.2f}ms {r['lane_ms']:>8.2f}ms "
            f"{r['git_ms']:>17.1f}ms {r['git_ms'] / r['validate_ms']:>12.0f}x "
            f"{r['git_ms'] / r['lane_ms']:>8.0f}x   (repo built in {r['build_s']:.1f}s)"
        )


if __name__ == "__main__":
    main()
