"""serve_bench's long-lived serves: ``impyard serve`` in its own process (with ``--web``
on a free loopback port and the bench's console client following it, when asked), tasks
queued to it in a burst and waited for, and the row that sets serve with the console
following beside serve alone."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from bench.common import percentile
from bench.console_client import CONNECT_SECONDS, ConsoleClient, Received
from bench.serve_landing import FACT, Queued, Side, measured
from impyard.home import Home
from impyard.queue import tasks
from impyard.queue.db import opened

#: How long a batch may take before the bench gives up on it.
WAIT_SECONDS = 1800.0


def ratio(numerator: float, denominator: float) -> str:
    return f"{numerator / denominator:.2f}x"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def serving(
    home: Path, concurrency: int, token: str | None = None, received: Received | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """A long-lived ``impyard serve`` (its output in the data root), stopped by SIGTERM.
    Given the console's ``token``: with ``--web``, and the bench's client logged in and
    following before this yields; what it received is added to ``received`` at the end."""
    args = ["serve", "--concurrency", str(concurrency)]
    client = None
    if token is not None:
        port = free_port()
        args += ["--web", f"127.0.0.1:{port}"]
        client = ConsoleClient("127.0.0.1", port, token)
    log = (home / f"serve-c{concurrency}.log").open("ab")
    serve = subprocess.Popen(
        [str(Path(sys.executable).parent / "impyard"), "--home", str(home), *args],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        if client is not None:
            client.start()
            if not client.wait_open(CONNECT_SECONDS):
                raise SystemExit(f"the console client got no overview; see {log.name}")
        yield serve
    finally:
        if client is not None:
            got = client.stop()
            if received is not None:
                received.add(got)
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
            task = tasks.add(conn, queued.imp, f"{FACT} {queued.marker} for {queued.imp}")
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


def serve_half(
    home: Path, batch: list[Queued], serve: subprocess.Popen[bytes]
) -> tuple[tuple[float, list[float], list[float]], dict[str, Queued]]:
    """Queue ``batch`` under a running serve and wait for it: its measure and its tasks."""
    added = enqueue(home, batch)
    return measured(home, wait_finished(home, set(added), serve)), added


def cpu_seconds(pid: int) -> float:
    """CPU time (user and system, all threads) process ``pid`` has used so far."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    # Fields after the command name, which is in parentheses and may hold spaces.
    after = stat.rsplit(")", 1)[1].split()
    return (int(after[11]) + int(after[12])) / os.sysconf("SC_CLK_TCK")


def warmed_half(
    home: Path, concurrency: int, batch: list[Queued], token: str | None, received: Received
) -> tuple[tuple[float, list[float], list[float], float], dict[str, Queued]]:
    """``batch`` under a serve of its own, warmed by one task first (excluded), so that
    start-up (the console's with ``token``) falls outside the measured window; also the
    CPU time serve's process spent while the batch drained."""
    with serving(home, concurrency, token, received) as serve:
        warm = enqueue(home, [Queued(batch[0].imp, f"[warm-{batch[0].marker}]")])
        wait_finished(home, set(warm), serve)
        before = cpu_seconds(serve.pid)
        (window, latencies, lanes), added = serve_half(home, batch, serve)
        return (window, latencies, lanes, cpu_seconds(serve.pid) - before), added


CONSOLE_HEADER = (
    "concurrency",
    "serve tasks/s",
    "console tasks/s",
    "ratio",
    "p50 ms",
    "console p50",
    "ratio",
    "p95 ms",
    "console p95",
    "ratio",
    "lane p50 ms",
    "console lane",
    "CPU ms/task",
    "console CPU",
    "ratio",
    "runs followed",
    "integrated",
)


def console_row(
    concurrency: int, served: Side, watched: Side, count: int, received: Received
) -> tuple[object, ...]:
    def lane(side: Side) -> float:
        return percentile(side.lanes_ms, 0.5) if side.lanes_ms else 0.0

    def cpu(side: Side) -> float:
        return side.cpu_seconds * 1000 / len(side.latencies_ms)

    p = percentile
    return (
        concurrency,
        f"{served.rate:.2f}",
        f"{watched.rate:.2f}",
        ratio(watched.rate, served.rate),
        served.p(0.5),
        watched.p(0.5),
        ratio(p(watched.latencies_ms, 0.5), p(served.latencies_ms, 0.5)),
        served.p(0.95),
        watched.p(0.95),
        ratio(p(watched.latencies_ms, 0.95), p(served.latencies_ms, 0.95)),
        f"{lane(served):.0f}",
        f"{lane(watched):.0f}",
        f"{cpu(served):.0f}",
        f"{cpu(watched):.0f}",
        ratio(cpu(watched), cpu(served)),
        # Of the runs under the console: its halves' and their two warm-up runs.
        f"{received.runs_followed}/{len(watched.latencies_ms) + 2}",
        f"{len(served.latencies_ms)}+{len(watched.latencies_ms)}/{2 * count}",
    )
