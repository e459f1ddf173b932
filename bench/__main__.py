"""`just bench`: every benchmark at full size, one after another (`python -m bench [name ...]`).

`python -m bench --smoke [name ...]` runs each at a size of seconds, in a process of its own,
two at a time, as the tests do: figures are not judged, only that every bench still runs and
its own checks hold (a refactor cannot break one unseen). Exit 1 names the benches that failed.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

BENCHES = (
    "checkout_bench",
    "lane_bench",
    "bigchange_bench",
    "launch_bench",
    "run_bench",
    "serve_bench",
    "cluster_bench",
    "agent_bench",
    "control_bench",
    "backup_bench",
    "inspect_bench",
    "soak_bench",
    "startup_bench",
    "web_bench",
)

#: Each bench's smoke size: its arguments, and the environment variables it reads.
SMOKE: dict[str, tuple[list[str], dict[str, str]]] = {
    "checkout_bench": (["--sizes", "200", "--reps", "1"], {}),
    "lane_bench": (
        [
            *("--sizes", "500", "--repeat", "1", "--burst", "20", "--burst-records", "500"),
            *("--first-run", "500"),
        ],
        {},
    ),
    "bigchange_bench": (["--records", "1,300", "--base", "100", "--repeat", "1"], {}),
    "launch_bench": (["2"], {}),
    "run_bench": ([], {"IMPYARD_BENCH_SIZES": "0", "IMPYARD_BENCH_REPS": "1"}),
    "serve_bench": ([], {"IMPYARD_BENCH_RECORDS": "100", "IMPYARD_BENCH_TASKS": "4"}),
    # The lab swarm sides run in the docker tests; the smoke keeps the agent on this engine.
    "cluster_bench": ([], {"IMPYARD_BENCH_TASKS": "4", "IMPYARD_BENCH_LAB": "0"}),
    # One pair per built agent, under runc, no warm-up.
    "agent_bench": (
        [],
        {"IMPYARD_BENCH_REPS": "1", "IMPYARD_BENCH_WARMUP": "0", "IMPYARD_BENCH_RUNTIMES": "runc"},
    ),
    "control_bench": (["--records", "200", "--samples", "3", "--pending", "1"], {}),
    "backup_bench": (["--runs", "2", "--blocks", "1"], {}),
    "inspect_bench": (["--mb", "2", "--repeat", "1", "--samples", "3"], {}),
    "soak_bench": (
        [
            "--tasks",
            "12",
            "--imps",
            "2",
            "--concurrency",
            "2",
            "--keep-seconds",
            "5",
            "--gc-seconds",
            "2",
            "--sample-seconds",
            "1",
        ],
        {},
    ),
    "startup_bench": (["--reps", "2"], {}),
    "web_bench": (["--runs", "200", "--candidates", "3", "--samples", "2"], {}),
}
#: Smokes run two at a time: each is a few seconds of one process and the engine's boxes,
#: and the benches share the engine with others (each counts only its own data root's).
SMOKE_WORKERS = 2
LONGEST = "agent_bench"
_PRINTING = threading.Lock()
#: A further smoke run of a bench with a second path worth keeping alive.
SMOKE_ALSO: dict[str, tuple[list[str], dict[str, str]]] = {
    "serve_bench": (
        [],
        {
            "IMPYARD_BENCH_RECORDS": "100",
            "IMPYARD_BENCH_TASKS": "4",
            "IMPYARD_BENCH_CONCURRENCY": "1",
            "IMPYARD_BENCH_CONSOLE": "1",
        },
    ),
}


def main() -> None:
    args = sys.argv[1:]
    smoke = "--smoke" in args
    chosen = [a for a in args if a != "--smoke"] or list(BENCHES)
    unknown = [name for name in chosen if name not in BENCHES]
    if unknown:
        raise SystemExit(f"unknown bench {', '.join(unknown)}; choose from {', '.join(BENCHES)}")
    if smoke:
        run_smoke(chosen)
        return
    # Each bench reads its own options from sys.argv: the names chosen here are not theirs.
    sys.argv = sys.argv[:1]
    for name in chosen:
        module = importlib.import_module(f"bench.{name}")
        print(f"\n# {name}", flush=True)
        module.main()


def run_smoke(chosen: list[str]) -> None:
    jobs = [
        (name, argv, env)
        for name in chosen
        for argv, env in (SMOKE[name], *([SMOKE_ALSO[name]] if name in SMOKE_ALSO else []))
    ]
    # The longest smoke starts first, so that it does not end the pass alone.
    jobs.sort(key=lambda job: job[0] != LONGEST)
    with ThreadPoolExecutor(max_workers=SMOKE_WORKERS) as pool:
        passed = list(pool.map(lambda job: smoke_one(*job), jobs))
    failed = sorted({name for (name, _, _), ok in zip(jobs, passed, strict=True) if not ok})
    if failed:
        raise SystemExit(f"bench smoke failed: {', '.join(failed)}")


def smoke_one(name: str, argv: list[str], env: dict[str, str]) -> bool:
    """Run one bench at its smoke size; its output is printed whole once it ends (another
    smoke runs beside it)."""
    started = time.monotonic()
    # The console command the benches time is the one beside this interpreter.
    path = f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ.get('PATH', '')}"
    done = subprocess.run(
        [sys.executable, "-m", f"bench.{name}", *argv],
        env={**os.environ, **env, "PATH": path},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        check=False,
    )
    took = time.monotonic() - started
    with _PRINTING:
        print(f"\n# {name} (smoke: {' '.join(argv) or env})", flush=True)
        print(done.stdout, end="", flush=True)
        print(f"# {name}: exit {done.returncode} in {took:.1f} s", flush=True)
    return done.returncode == 0


if __name__ == "__main__":
    main()
