"""`impyard serve` throughput against the same number of bare `docker run --rm` at the
same parallelism. Two workloads, chosen by the first argument or IMPYARD_BENCH_SERVE
(``python -m bench.serve_bench mixed``, ``IMPYARD_BENCH_SERVE=mixed python -m bench
serve_bench``):

``single`` (the default): one imp on a repository of IMPYARD_BENCH_RECORDS (default
100,000) records; at each concurrency of IMPYARD_BENCH_CONCURRENCY (default 1,2,4)
IMPYARD_BENCH_TASKS (default 50) one-note tasks, each half queued in a burst, then
drained by ``impyard serve --once`` (its start-up inside the measured window).

``mixed``: IMPYARD_BENCH_IMPS (default 10) imps of IMPYARD_BENCH_RECORDS (default
10,000) records each, packed as the lane's folds leave an imp (records left loose, as
in an imp from before folds, made each lane pass fold 256 of them: 1.34x against 1.48x
at concurrency 1); at each concurrency of IMPYARD_BENCH_CONCURRENCY (default
1,2,4,8) one long-lived ``impyard serve --concurrency N`` (warmed by one task per imp;
with IMPYARD_BENCH_WARM=1 the org policy keeps N ready boxes, ``[box.warm] boxes``)
gets IMPYARD_BENCH_TASKS (default 200) one-note tasks spread evenly over the imps in
shuffled order. Each task's box writes its prompt as one note, so every task can be
found on main. Tasks are added with the queue's own ``tasks.add`` (what ``impyard task
add`` runs, without a process start per task, which would pace the queue): a burst,
as an owner's script would queue them.

IMPYARD_BENCH_CONSOLE=1 (``single`` only) adds a third side: serve with the owner's
console open and following. Each serve half then runs under a long-lived serve of its
own, warmed by one task (excluded, so neither side's start-up is measured): ``serve``
alone, or ``serve --web 127.0.0.1:<free port>`` with a client in this process doing
what a browser on the console does (``bench.console_client``): logged in with the token
from ``impyard web --print-url``, the overview loaded and its live part streamed, and
the page of a run the overview lists as running opened and its box output followed to
its ``end``, then back to the overview for the next running run. A second table sets
the two side by side, ratios console/no-console: throughput, p50 and p95 latency, and
the lane (the p50 of the runs' ``checkpoint`` phase, from their manifests) and the CPU
time serve's process spent per task while the half drained (``/proc``); a line per
concurrency counts what the client received (pages, overview updates, runs followed,
output events and bytes), so it shows the client really followed. Halves in ABCCBA
order (bare, serve, console, console, serve, bare).

Per-task latency is from the task's ``created_at`` (written by ``tasks.add``) to its
run's ``knowledge.integrated`` journal entry (written once the lane moved main): both
recorded by Impyard, neither a polling guess. Serve's throughput is tasks over the time
from the first ``created_at`` to the last integration. The bare side submits the same
number of ``docker run --rm`` (same image, same one-note write, ``--network none``) to
a pool of the same parallelism at once; a container's latency is from that submission
to its exit, and throughput is tasks over the time to the last exit. Halves in ABBA
order (bare, serve, serve, bare): drift in the machine's speed falls on both sides.

The load average is printed at the start and the end (other work on the machine shows
in every side alike, but it widens the spread between runs). At the end it checks that
every task of every side landed exactly once: done and integrated, its run
journaled ``knowledge.integrated`` once, its ``Impyard-Task`` trailer on exactly one
commit of its own imp's main (and no other imp's), and its prompt in exactly one note.
"""

from __future__ import annotations

import os
import random
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.common import add_records, impyard, print_table, remove_data_root, scratch_dir
from bench.console_client import Received, token_of
from bench.run_bench import bare_run, setup
from bench.serve_console import (
    CONSOLE_HEADER,
    console_row,
    enqueue,
    ratio,
    serve_half,
    serving,
    wait_finished,
    warmed_half,
)
from bench.serve_landing import Queued, Side, landing_problems, measured
from impyard.home import Home
from impyard.queue import tasks
from impyard.queue.db import opened

#: The box command: its prompt (the task file) as one note.
PROMPT_NOTE = 'impyard-note bench one-note --source https://example.com < "$IMPYARD_TASK_FILE"'


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def finished_tasks(home: Path, ids: set[str]) -> list[tasks.Task]:
    with opened(Home(home).db) as conn:
        return [t for t in tasks.list_tasks(conn) if t.id in ids]


def single() -> None:
    records = int(os.environ.get("IMPYARD_BENCH_RECORDS", "100000"))
    count = int(os.environ.get("IMPYARD_BENCH_TASKS", "50"))
    levels = [int(c) for c in os.environ.get("IMPYARD_BENCH_CONCURRENCY", "1,2,4").split(",")]
    console = os.environ.get("IMPYARD_BENCH_CONSOLE", "") == "1"
    home = setup(records, command=PROMPT_NOTE)
    impyard(home, "run", "bench", "--prompt", "warm-up: builds the base layer once")
    # The login URL an owner opens; the bench's client reads its token from it.
    token = token_of(impyard(home, "web", "--print-url").stdout) if console else None
    target = scratch_dir("impyard-servebench-target-")
    os.chown(target, 65532, 65532)
    print(f"load average at start: {load()}", flush=True)
    rows: list[tuple[object, ...]] = []
    console_rows: list[tuple[object, ...]] = []
    queued: dict[str, Queued] = {}
    try:
        for concurrency in levels:
            sides = {"A": Side(), "B": Side(), "C": Side()}
            received = Received()
            # Halves in ABBA order (bare, serve, serve, bare), ABCCBA with the console
            # (C): drift in this machine's speed falls on every side alike.
            order = "ABC" if console else "AB"
            halves = ((count // 2, order), (count - count // 2, order[::-1]))
            for n, (half, sequence) in enumerate(halves):
                for side in sequence:
                    if side == "A":
                        sides["A"].add(*bare_half(target, half, concurrency))
                        continue
                    label = f"c{concurrency}-{n}{side}"
                    batch = [Queued("bench", f"[{label}-{i}]") for i in range(half)]
                    if console:
                        follow = token if side == "C" else None
                        measure, added = warmed_half(home, concurrency, batch, follow, received)
                        sides[side].add(*measure)
                    else:
                        added = enqueue(home, batch)
                        impyard(home, "serve", "--once", "--concurrency", str(concurrency))
                        sides[side].add(*measured(home, finished_tasks(home, set(added))))
                    queued.update(added)
            bare, served, watched = sides["A"], sides["B"], sides["C"]
            rows.append(
                (
                    concurrency,
                    f"{bare.rate:.2f}",
                    f"{served.rate:.2f}",
                    ratio(served.rate, bare.rate),
                    served.p(0.5),
                    served.p(0.95),
                    bare.p(0.5),
                    bare.p(0.95),
                    f"{len(served.latencies_ms)}/{count}",
                )
            )
            if console:
                console_rows.append(console_row(concurrency, served, watched, count, received))
                print(f"c{concurrency} console client: {received.summary()}", flush=True)
                if not received.runs_followed:
                    print("  (no run followed: each ended between the overview's looks)")
        problems = landing_problems(home, queued)
        print_single(records, count, rows, console_rows)
        print(f"load average at end: {load()}")
        report_landing(home, queued, problems)
    except BaseException:
        print(f"data root kept for inspection: {home}", file=sys.stderr)
        shutil.rmtree(target, ignore_errors=True)
        raise
    remove_data_root(home)
    shutil.rmtree(target, ignore_errors=True)


def print_single(
    records: int, count: int, rows: list[tuple[object, ...]], console_rows: list[tuple[object, ...]]
) -> None:
    how = "serve, a warmed one per half," if console_rows else "serve --once"
    print_table(
        f"{how} (single: {records} records, {count} one-note tasks per concurrency)"
        " vs bare docker run --rm; latency from queueing / submission",
        (
            "concurrency",
            "docker tasks/s",
            "serve tasks/s",
            "ratio",
            "serve p50 ms",
            "serve p95 ms",
            "docker p50 ms",
            "docker p95 ms",
            "integrated",
        ),
        rows,
    )
    if console_rows:
        print_table(
            "serve --web with a console client following vs serve alone, each warmed"
            " (ratios console/no-console; lane: the runs' checkpoint phase)",
            CONSOLE_HEADER,
            console_rows,
        )


def report_landing(home: Path, queued: dict[str, Queued], problems: list[str]) -> None:
    print(f"\nlanded exactly once: {len(queued) - len(problems)}/{len(queued)} tasks checked")
    for problem in problems[:20]:
        print(f"  {problem}")
    if problems:
        raise SystemExit(f"{len(problems)} landing problem(s); data root kept at {home}")


# -- mixed: many imps under one long-lived serve --------------------------------------


def mixed_setup(imps: list[str], records: int) -> Path:
    from impyard.knowledge.integration.origin import publish_origin

    home = scratch_dir("impyard-servebench-mixed-")
    impyard(home, "init")
    impyard(home, "deploy")
    for imp in imps:
        impyard(home, "imp", "create", imp, "--command", PROMPT_NOTE)
        if records:
            add_records(Home(home).repo(imp), records, packed=True)
            publish_origin(Home(home), imp)
    return home


def keep_ready_boxes(home: Path, count: int) -> None:
    """The org policy's ``[box.warm] boxes``, deployed (the imps share one box shape)."""
    org = home / "policy" / "org.toml"
    text = org.read_text()
    start = text.index("[box.warm]")
    line_start = text.index("boxes = ", start)
    line_end = text.index("\n", line_start)
    org.write_text(text[:line_start] + f"boxes = {count}" + text[line_end:])
    impyard(home, "deploy")


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


def mixed() -> None:
    imp_count = int(os.environ.get("IMPYARD_BENCH_IMPS", "10"))
    records = int(os.environ.get("IMPYARD_BENCH_RECORDS", "10000"))
    count = int(os.environ.get("IMPYARD_BENCH_TASKS", "200"))
    levels = [int(c) for c in os.environ.get("IMPYARD_BENCH_CONCURRENCY", "1,2,4,8").split(",")]
    warm_boxes = os.environ.get("IMPYARD_BENCH_WARM", "") == "1"
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
            if warm_boxes:
                keep_ready_boxes(home, concurrency)
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
                        measure, added = serve_half(home, batch, serve)
                        served.add(*measure)
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
        ready = "N ready boxes" if warm_boxes else "no ready boxes"
        print_table(
            f"serve (mixed: {imp_count} imps of {records} records, {count} one-note tasks per"
            f" concurrency, {ready}) vs bare docker run --rm; latency from submission",
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
        report_landing(home, queued, problems)
    except BaseException:
        print(f"data root kept for inspection: {home}", file=sys.stderr)
        shutil.rmtree(target, ignore_errors=True)
        raise
    remove_data_root(home)
    shutil.rmtree(target, ignore_errors=True)


def main() -> None:
    mode = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("IMPYARD_BENCH_SERVE", "single")
    if mode not in ("single", "mixed"):
        raise SystemExit(f"unknown serve_bench workload {mode!r}: choose single or mixed")
    if mode == "mixed" and os.environ.get("IMPYARD_BENCH_CONSOLE", "") == "1":
        raise SystemExit("IMPYARD_BENCH_CONSOLE=1 is measured on the single workload only")
    if mode == "single":
        single()
    else:
        mixed()


if __name__ == "__main__":
    main()
