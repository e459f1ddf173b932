"""`impyard serve` throughput against the same number of bare `docker run --rm` at the
same parallelism. Two workloads, chosen by the first argument or IMPYARD_BENCH_SERVE
(``python -m bench.serve_bench mixed``, ``IMPYARD_BENCH_SERVE=mixed python -m bench
serve_bench``):

``single`` (the default): one imp on a repository of IMPYARD_BENCH_RECORDS (default
100,000) records; IMPYARD_BENCH_TASKS (default 50) one-note tasks queued, then drained
by ``impyard serve --once`` at concurrency 1, 2, 4; serve's wall time (start-up
included) against a pool of bare runs.

``mixed``: IMPYARD_BENCH_IMPS (default 10) imps of IMPYARD_BENCH_RECORDS (default
10,000) records each; at each concurrency of IMPYARD_BENCH_CONCURRENCY (default
1,2,4,8) one long-lived ``impyard serve --concurrency N`` (warmed by one task per imp)
gets IMPYARD_BENCH_TASKS (default 200) one-note tasks spread evenly over the imps in
shuffled order. Each task's box writes its prompt as one note, so every task can be
found on main. Tasks are added with the queue's own ``tasks.add`` (what ``impyard task
add`` runs, without a process start per task, which would pace the queue): a burst,
as an owner's script would queue them.

Per-task latency is from the task's ``created_at`` (written by ``tasks.add``) to its
run's ``knowledge.integrated`` journal entry (written once the lane moved main): both
recorded by Impyard, neither a polling guess. Serve's throughput is tasks over the time
from the first ``created_at`` to the last integration. The bare side submits the same
number of ``docker run --rm`` (same image, same one-note write, ``--network none``) to
a pool of the same parallelism at once; a container's latency is from that submission
to its exit, and throughput is tasks over the time to the last exit. Halves in ABBA
order (bare, serve, serve, bare): drift in the machine's speed falls on both sides.

At the end it checks that every task landed exactly once: done and integrated, its run
journaled ``knowledge.integrated`` once, its ``Impyard-Task`` trailer on exactly one
commit of its own imp's main (and no other imp's), and its prompt in exactly one note.
"""

from __future__ import annotations

import contextlib
import functools
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import pygit2

from bench.common import (
    add_records,
    impyard,
    percentile,
    print_table,
    scratch_dir,
    timed,
)
from bench.run_bench import NOTE, bare_run, setup
from impyard.home import Home
from impyard.journal import Journal
from impyard.names import utc_epoch
from impyard.queue import tasks
from impyard.queue.db import opened

#: How long a batch may take before the bench gives up on it.
WAIT_SECONDS = 1800.0
#: The mixed workload's box command: its prompt (the task file) as one note.
MIXED_NOTE = 'impyard-note bench one-note --source https://example.com < "$IMPYARD_TASK_FILE"'


def bare_batch(target: Path, tasks: int, concurrency: int) -> None:
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(lambda _: bare_run(target, "runc"), range(tasks)))


def integrated(home: Path) -> int:
    listed = impyard(home, "task", "list", "--state", "done", "--json").stdout
    return listed.count('"checkpoint": "integrated"')


def serve_batch(home: Path, tasks: int, concurrency: int) -> None:
    impyard(home, "serve", "--once", "--concurrency", str(concurrency))


def single() -> None:
    records = int(os.environ.get("IMPYARD_BENCH_RECORDS", "100000"))
    tasks = int(os.environ.get("IMPYARD_BENCH_TASKS", "50"))
    home = setup(records, command=NOTE)
    impyard(home, "run", "bench", "--prompt", "warm-up: builds the base layer once")
    target = scratch_dir("impyard-servebench-target-")
    os.chown(target, 65532, 65532)
    rows = []
    for concurrency in (1, 2, 4):
        before = integrated(home)
        # ABBA halves (bare, serve, serve, bare): drift in this machine's speed during
        # the measurement falls on both sides alike.
        halves = (tasks // 2, tasks - tasks // 2)
        bare_ms = serve_ms = 0.0
        for order, half in (("AB", halves[0]), ("BA", halves[1])):
            for i in range(half):
                impyard(home, "task", "add", "bench", "--prompt", f"bench fact {order} {i}")
            for side in order:
                if side == "A":
                    bare_ms += timed(functools.partial(bare_batch, target, half, concurrency))
                else:
                    serve_ms += timed(functools.partial(serve_batch, home, half, concurrency))
        landed = integrated(home) - before
        bare_rate, serve_rate = tasks / (bare_ms / 1000), tasks / (serve_ms / 1000)
        rows.append(
            (
                concurrency,
                f"{bare_rate:.2f}",
                f"{serve_rate:.2f}",
                f"{serve_rate / bare_rate:.2f}x",
                f"{landed}/{tasks}",
            )
        )
    print_table(
        f"serve --once vs bare docker run, {tasks} one-note tasks, {records} records",
        ("concurrency", "docker runs/s", "serve runs/s", "ratio", "landed"),
        rows,
    )
    shutil.rmtree(home, ignore_errors=True)
    shutil.rmtree(target, ignore_errors=True)


# -- mixed: many imps under one long-lived serve --------------------------------------


@dataclass
class Side:
    """One side's measurement at one concurrency, summed over its halves."""

    seconds: float = 0.0
    latencies_ms: list[float] = field(default_factory=list)

    def add(self, seconds: float, latencies_ms: list[float]) -> None:
        self.seconds += seconds
        self.latencies_ms.extend(latencies_ms)

    @property
    def rate(self) -> float:
        return len(self.latencies_ms) / self.seconds

    def p(self, fraction: float) -> str:
        return f"{percentile(self.latencies_ms, fraction):.0f}"


@dataclass(frozen=True)
class Queued:
    """A task the bench added: its imp and the marker its note must carry."""

    imp: str
    marker: str


def mixed_setup(imps: list[str], records: int) -> Path:
    from impyard.knowledge.origin import publish_origin

    home = scratch_dir("impyard-servebench-mixed-")
    impyard(home, "init")
    impyard(home, "deploy")
    for imp in imps:
        impyard(home, "imp", "create", imp, "--command", MIXED_NOTE)
        if records:
            add_records(Home(home).repo(imp), records)
            publish_origin(Home(home), imp)
    return home


@contextlib.contextmanager
def serving(home: Path, concurrency: int) -> Iterator[subprocess.Popen[bytes]]:
    """A long-lived ``impyard serve`` (its output in the data root), stopped by SIGTERM."""
    log = (home / f"serve-c{concurrency}.log").open("wb")
    serve = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "impyard"),
            "--home",
            str(home),
            "serve",
            "--concurrency",
            str(concurrency),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        yield serve
    finally:
        serve.send_signal(signal.SIGTERM)
        try:
            serve.wait(timeout=300)
        except subprocess.TimeoutExpired:
            serve.kill()
            serve.wait()
        log.close()


def enqueue(home: Path, batch: list[Queued]) -> dict[str, Queued]:
    """Add ``batch`` in order, as fast as the queue takes them; task id -> what it is."""
    added: dict[str, Queued] = {}
    with opened(Home(home).db) as conn:
        for queued in batch:
            task = tasks.add(conn, queued.imp, f"mixed fact {queued.marker} for {queued.imp}")
            added[task.id] = queued
    return added


def wait_finished(home: Path, ids: set[str], serve: subprocess.Popen[bytes]) -> list[tasks.Task]:
    """Wait until every task in ``ids`` is done (polled only to know when to stop)."""
    deadline = time.monotonic() + WAIT_SECONDS
    while True:
        with opened(Home(home).db) as conn:
            found = [t for t in tasks.list_tasks(conn) if t.id in ids]
        if all(t.state == "done" for t in found) and len(found) == len(ids):
            return found
        if serve.poll() is not None:
            raise SystemExit(f"serve exited ({serve.returncode}); see {home}/serve-c*.log")
        if time.monotonic() > deadline:
            raise SystemExit(f"tasks unfinished after {WAIT_SECONDS:.0f} s; see {home}")
        time.sleep(0.2)


def integrated_at(home: Path) -> dict[str, float]:
    """When each run's exit checkpoint landed (epoch seconds), from the journal."""
    found: dict[str, float] = {}
    for entry in Journal(Home(home).journal).read(event="knowledge.integrated"):
        stamp = utc_epoch(str(entry.get("ts")))
        if stamp is not None:
            found.setdefault(str(entry.get("run")), stamp)
    return found


def serve_half(
    home: Path, batch: list[Queued], serve: subprocess.Popen[bytes]
) -> tuple[float, list[float], dict[str, Queued]]:
    """Queue ``batch`` under a running serve and wait for it: (window, latencies, tasks)."""
    added = enqueue(home, batch)
    finished = wait_finished(home, set(added), serve)
    landed = integrated_at(home)
    starts, ends, latencies = [], [], []
    for task in finished:
        created = utc_epoch(task.created_at)
        end = landed.get(task.run_id or "")
        if task.checkpoint != "integrated" or created is None or end is None:
            continue  # reported by the landing check
        starts.append(created)
        ends.append(end)
        latencies.append((end - created) * 1000)
    if not latencies:
        raise SystemExit(f"no task of the batch integrated; see {home}/serve-c*.log")
    return max(ends) - min(starts), latencies, added


def bare_half(target: Path, count: int, concurrency: int) -> tuple[float, list[float]]:
    """``count`` bare runs submitted at once to a pool of ``concurrency``."""
    start = time.monotonic()

    def one(_: int) -> float:
        bare_run(target, "runc")
        return time.monotonic()

    with ThreadPoolExecutor(concurrency) as pool:
        ends = list(pool.map(one, range(count)))
    return max(ends) - start, [(end - start) * 1000 for end in ends]


def spread(imps: list[str], count: int, label: str, rng: random.Random) -> list[Queued]:
    """``count`` tasks over ``imps`` evenly, in shuffled order; markers are unique."""
    owners = [imps[i % len(imps)] for i in range(count)]
    rng.shuffle(owners)
    return [Queued(imp, f"[{label}-{i}]") for i, imp in enumerate(owners)]


def bench_notes(repo: pygit2.Repository, tree: pygit2.Tree) -> Iterator[str]:
    """The text of every note under ``records/bench`` of ``tree``."""
    try:
        notes = cast(pygit2.Tree, cast(pygit2.Tree, tree / "records") / "bench")
    except KeyError:
        return
    for entry in notes:
        yield cast(pygit2.Blob, repo[entry.id]).data.decode()


def landing_problems(home: Path, queued: dict[str, Queued]) -> list[str]:
    """Whatever shows that a task did not land exactly once, on its own imp."""
    problems: list[str] = []
    with opened(Home(home).db) as conn:
        by_id = {t.id: t for t in tasks.list_tasks(conn)}
    runs: dict[str, str] = {}
    for task_id in queued:
        task = by_id.get(task_id)
        if task is None or task.state != "done" or task.checkpoint != "integrated":
            state = "missing" if task is None else f"{task.state}/{task.checkpoint}/{task.error}"
            problems.append(f"task {task_id}: {state}")
        elif task.run_id:
            runs[task.run_id] = task_id
    journaled = Counter(
        str(e.get("run")) for e in Journal(Home(home).journal).read(event="knowledge.integrated")
    )
    problems += [
        f"run {r} journaled integrated {journaled[r]} times" for r in runs if journaled[r] != 1
    ]
    trailers: Counter[tuple[str, str]] = Counter()
    markers: Counter[tuple[str, str]] = Counter()
    for imp in sorted({q.imp for q in queued.values()}):
        repo = pygit2.Repository(str(Home(home).repo(imp)))
        head = repo.references["refs/heads/main"].peel(pygit2.Commit)
        for commit in repo.walk(head.id, pygit2.enums.SortMode.TOPOLOGICAL):
            for line in commit.message.splitlines():
                if line.startswith("Impyard-Task: "):
                    trailers[(line.removeprefix("Impyard-Task: "), imp)] += 1
        for text in bench_notes(repo, head.tree):
            for line in text.splitlines():
                if line.startswith("mixed fact ["):
                    markers[(line.split()[2], imp)] += 1
    for task_id, q in queued.items():
        if trailers[(task_id, q.imp)] != 1:
            problems.append(f"task {task_id}: {trailers[(task_id, q.imp)]} commits on {q.imp}")
        if markers[(q.marker, q.imp)] != 1:
            problems.append(f"task {task_id}: {markers[(q.marker, q.imp)]} notes on {q.imp}")
    elsewhere = [k for k in trailers if k[0] in queued and k[1] != queued[k[0]].imp]
    problems += [f"task {t}: landed on {imp}" for t, imp in elsewhere]
    return problems


def mixed() -> None:
    imp_count = int(os.environ.get("IMPYARD_BENCH_IMPS", "10"))
    records = int(os.environ.get("IMPYARD_BENCH_RECORDS", "10000"))
    count = int(os.environ.get("IMPYARD_BENCH_TASKS", "200"))
    levels = [int(c) for c in os.environ.get("IMPYARD_BENCH_CONCURRENCY", "1,2,4,8").split(",")]
    imps = [f"mix{i}" for i in range(imp_count)]
    home = mixed_setup(imps, records)
    target = scratch_dir("impyard-servebench-target-")
    os.chown(target, 65532, 65532)
    rng = random.Random(20260101)
    rows = []
    queued: dict[str, Queued] = {}
    try:
        for concurrency in levels:
            bare, served = Side(), Side()
            with serving(home, concurrency) as serve:
                # Warm-up (excluded): each imp's base layer, serve's caches, the engine.
                warm = enqueue(home, spread(imps, len(imps), f"warm-c{concurrency}", rng))
                wait_finished(home, set(warm), serve)
                bare_half(target, min(concurrency, count), concurrency)
                halves = (count // 2, count - count // 2)
                for order, half in (("AB", halves[0]), ("BA", halves[1])):
                    for side in order:
                        if side == "A":
                            bare.add(*bare_half(target, half, concurrency))
                            continue
                        batch = spread(imps, half, f"c{concurrency}-{order}", rng)
                        window, latencies, added = serve_half(home, batch, serve)
                        served.add(window, latencies)
                        queued.update(added)
            rows.append(
                (
                    concurrency,
                    f"{bare.rate:.2f}",
                    f"{served.rate:.2f}",
                    f"{served.rate / bare.rate:.2f}x",
                    served.p(0.5),
                    served.p(0.99),
                    bare.p(0.5),
                    bare.p(0.99),
                    f"{len(served.latencies_ms)}/{count}",
                )
            )
        problems = landing_problems(home, queued)
        print_table(
            f"serve (mixed: {imp_count} imps of {records} records, {count} one-note tasks per"
            " concurrency) vs bare docker run --rm; latency from submission",
            (
                "concurrency",
                "docker tasks/s",
                "serve tasks/s",
                "ratio",
                "serve p50 ms",
                "serve p99 ms",
                "docker p50 ms",
                "docker p99 ms",
                "integrated",
            ),
            rows,
        )
        print(f"\nlanded exactly once: {len(queued) - len(problems)}/{len(queued)} tasks checked")
        for problem in problems[:20]:
            print(f"  {problem}")
        if problems:
            raise SystemExit(f"{len(problems)} landing problem(s); data root kept at {home}")
    except BaseException:
        print(f"data root kept for inspection: {home}", file=sys.stderr)
        shutil.rmtree(target, ignore_errors=True)
        raise
    shutil.rmtree(home, ignore_errors=True)
    shutil.rmtree(target, ignore_errors=True)


def main() -> None:
    mode = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("IMPYARD_BENCH_SERVE", "single")
    if mode not in ("single", "mixed"):
        raise SystemExit(f"unknown serve_bench workload {mode!r}: choose single or mixed")
    if mode == "single":
        single()
    else:
        mixed()


if __name__ == "__main__":
    main()
