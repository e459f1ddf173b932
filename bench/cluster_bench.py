"""Runs placed on a cluster against the same runs on this host's engine.

Sides, each draining the same IMPYARD_BENCH_TASKS (default 24) one-note tasks with
``impyard serve --once`` at IMPYARD_BENCH_CONCURRENCY (default 4), on a data root of its
own (same imp, same box command):

``local``    serve's boxes on this host's engine (no cluster);
``agent``    serve as a cluster's control plane with one node agent (``impyard node``) as a
             process of this host on this host's engine: the protocol's own cost (lease,
             files, relay, output, tree back, fencing) without a second engine;
``lab-1``, ``lab-2``  the same on a 1- and a 2-node lab swarm (``scripts/swarm-lab.sh``:
             one dockerd per node, the agent a Swarm service); needs root, network
             namespaces and the ``impyard-node`` image; IMPYARD_BENCH_LAB=0 leaves them out.

Each side reports throughput (tasks over the time from the first task's ``created_at`` to
the last integration) and p50/p95 task latency (``created_at`` to the run's
``knowledge.integrated`` journal entry), and its ratios against ``local``. The lab's nodes
share this machine's cores with the control plane, so a second node adds no CPU: its
figures show the cost of placement and isolation, not scaling. A second table gives the
per-run cost of remote placement at concurrency 1 (each side's median of its runs' own
``total`` timing and of task latency), against the target of 1.3x a local run: each
remote side's single runs alternate, in IMPYARD_BENCH_ROUNDS (default 3) rounds, with as
many local ones measured beside them while that side's engines and agents are up, so each
ratio is against local runs on the same loaded machine. At the end every task of every
side must have landed exactly once.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from bench.common import impyard, median, print_table
from bench.run_bench import setup
from bench.serve_bench import PROMPT_NOTE, finished_tasks
from bench.serve_console import enqueue, ratio
from bench.serve_landing import Queued, Side, landing_problems, measured
from impyard.home import Home
from impyard.runs.records import manifest as manifests

TOP = Path(__file__).resolve().parent.parent
LAB = ["bash", str(TOP / "scripts" / "swarm-lab.sh")]


def cluster_policy(home: Path, listen: str) -> None:
    org = home / "policy" / "org.toml"
    org.write_text(
        org.read_text() + f'\n[cluster]\nenabled = true\nlisten = "{listen}"\nlease_seconds = 10\n'
    )
    impyard(home, "deploy")


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def agent_process(home: Path) -> subprocess.Popen[bytes]:
    from impyard.cluster.plane.token import cluster_token

    cluster_token(Home(home))
    work = home.parent / f"{home.name}-node"
    work.mkdir(exist_ok=True)
    policy_url = next(
        line.split('"')[1]
        for line in (home / "policy" / "org.toml").read_text().splitlines()
        if line.startswith("listen = ")
    )
    env = {
        **os.environ,
        "IMPYARD_CLUSTER_URL": f"http://{policy_url}",
        "IMPYARD_NODE_NAME": "bench-agent",
        "IMPYARD_NODE_WORK": str(work),
        "IMPYARD_NODE_CAPACITY": "8",
        "IMPYARD_CLUSTER_TOKEN_FILE": str(home / "cluster" / "token"),
    }
    return subprocess.Popen(
        [sys.executable, "-m", "impyard", "node"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def drain(
    home: Path, label: str, count: int, concurrency: int
) -> tuple[Side, list[float], dict[str, Queued]]:
    batch = [Queued("bench", f"[{label}-{i}]") for i in range(count)]
    added = enqueue(home, batch)
    impyard(home, "serve", "--once", "--concurrency", str(concurrency))
    finished = finished_tasks(home, set(added))
    side = Side()
    side.add(*measured(home, finished))
    totals = []
    for task in finished:
        m = manifests.read_or_none(Home(home), task.run_id or "")
        if m is not None and "total" in m.timings_ms:
            totals.append(m.timings_ms["total"])
    return side, totals, added


def _join(into: Side, more: Side) -> None:
    into.add(more.seconds, more.latencies_ms, more.lanes_ms, more.cpu_seconds)


def main() -> None:
    count = int(os.environ.get("IMPYARD_BENCH_TASKS", "24"))
    concurrency = int(os.environ.get("IMPYARD_BENCH_CONCURRENCY", "4"))
    with_lab = os.environ.get("IMPYARD_BENCH_LAB", "1") != "0" and os.geteuid() == 0
    sides: dict[str, tuple[Side, list[float]]] = {}
    singles: dict[str, tuple[Side, list[float]]] = {}
    problems: list[str] = []
    homes: list[Path] = []
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")

    rounds = int(os.environ.get("IMPYARD_BENCH_ROUNDS", "3"))
    per_round = max(2, count // (2 * rounds))
    #: Each remote side's local runs, measured beside its own.
    besides: dict[str, tuple[Side, list[float]]] = {}
    local_queued: dict[str, Queued] = {}

    def run_side(name: str, home: Path) -> None:
        queued: dict[str, Queued] = {}
        _warm, _totals, added = drain(home, f"{name}-warm", 1, 1)  # not measured
        queued |= added
        side, totals, added = drain(home, f"{name}-burst", count, concurrency)
        queued |= added
        sides[name] = (side, totals)
        one, one_totals = Side(), []
        beside, beside_totals = Side(), []
        for n in range(rounds):
            if name != "local":
                here, here_totals, added = drain(local, f"{name}-beside-{n}", per_round, 1)
                local_queued.update(added)
                _join(beside, here)
                beside_totals += here_totals
            there, there_totals, added = drain(home, f"{name}-one-{n}", per_round, 1)
            queued |= added
            _join(one, there)
            one_totals += there_totals
        singles[name] = (one, one_totals)
        besides[name] = (beside, beside_totals) if name != "local" else (one, one_totals)
        if name == "local":
            local_queued.update(queued)
        else:
            problems.extend(f"{name}: {p}" for p in landing_problems(home, queued))

    local = setup(0, command=PROMPT_NOTE)
    homes.append(local)
    run_side("local", local)

    agent_home = setup(0, command=PROMPT_NOTE)
    homes.append(agent_home)
    cluster_policy(agent_home, f"127.0.0.1:{free_port()}")
    agent = agent_process(agent_home)
    try:
        run_side("agent", agent_home)
    finally:
        agent.send_signal(signal.SIGTERM)
        agent.wait(30)

    if with_lab:
        for nodes in (1, 2):
            lab_home = setup(0, command=PROMPT_NOTE)
            homes.append(lab_home)
            subprocess.run([*LAB, "down"], check=True, capture_output=True)
            subprocess.run(
                [*LAB, "up", str(nodes), "--home", str(lab_home)],
                check=True,
                capture_output=True,
                env={**os.environ, "IMPYARD_CLI": shutil.which("impyard") or "impyard"},
            )
            try:
                run_side(f"lab-{nodes}", lab_home)
            finally:
                subprocess.run([*LAB, "down"], check=False, capture_output=True)

    base, _ = sides["local"]
    rows = []
    for name, (side, _totals) in sides.items():
        rows.append(
            (
                name,
                f"{side.rate:.2f}",
                ratio(side.rate, base.rate),
                side.p(0.5),
                side.p(0.95),
                f"{len(side.latencies_ms)}/{count}",
            )
        )
    print_table(
        f"{count} one-note tasks at concurrency {concurrency}",
        ["side", "tasks/s", "vs local", "p50 ms", "p95 ms", "landed"],
        rows,
    )
    per_run: list[tuple[str, ...]] = []
    for name, (side, totals) in singles.items():
        beside, beside_totals = besides[name]
        run_ratio = median(totals) / median(beside_totals) if totals and beside_totals else 0.0
        lat_ratio = median(side.latencies_ms) / median(beside.latencies_ms)
        per_run.append(
            (
                name,
                f"{median(totals):.0f}",
                f"{median(beside_totals):.0f}",
                f"{run_ratio:.2f}x",
                f"{median(side.latencies_ms):.0f}",
                f"{median(beside.latencies_ms):.0f}",
                f"{lat_ratio:.2f}x",
            )
        )
    print_table(
        f"per run at concurrency 1, {rounds} rounds beside local runs (target: remote ≤ 1.3x)",
        [
            "side",
            "run total ms p50",
            "local beside",
            "vs local",
            "task latency ms p50",
            "local beside",
            "vs local",
        ],
        per_run,
    )
    problems.extend(f"local: {p}" for p in landing_problems(local, local_queued))
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if problems:
        print("landing problems:\n  " + "\n  ".join(problems[:20]), file=sys.stderr)
        sys.exit(1)
    print("every task of every side landed exactly once")
    for home in homes:
        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(home.parent / f"{home.name}-node", ignore_errors=True)  # agent_process's


if __name__ == "__main__":
    main()
