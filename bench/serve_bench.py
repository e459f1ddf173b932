"""Throughput of `impyard serve --once` for one-note tasks at concurrency 1, 2, 4 against
the same number of bare `docker run --rm` with the same parallelism, on a repository
of IMPYARD_BENCH_RECORDS (default 100,000) records. IMPYARD_BENCH_TASKS (default 50).
"""

from __future__ import annotations

import functools
import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.common import impyard, print_table, scratch_dir, timed
from bench.run_bench import NOTE, bare_run, setup


def bare_batch(target: Path, tasks: int, concurrency: int) -> None:
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(lambda _: bare_run(target), range(tasks)))


def integrated(home: Path) -> int:
    listed = impyard(home, "task", "list", "--state", "done", "--json").stdout
    return listed.count('"checkpoint": "integrated"')


def serve_batch(home: Path, tasks: int, concurrency: int) -> None:
    impyard(home, "serve", "--once", "--concurrency", str(concurrency))


def main() -> None:
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


if __name__ == "__main__":
    main()
