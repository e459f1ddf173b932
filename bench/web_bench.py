"""The console with a month of runs: overview, review and /metrics response times over
a data root holding 10,000 finished runs (and some candidates to review).

    python -m bench.web_bench [--runs 10000] [--candidates 50] [--samples 15]

Runs are written as files the way the pipeline leaves them (``runs/<id>/manifest.json``);
candidates are refused changes kept by the lane (``refs/candidates/<id>`` with a
manifest). Each page is requested through the app (Starlette's test client, in process:
the server's time, no network): the first request (the run index reads every manifest
once), then ``--samples`` more (only what changed is read), median and p90.

Target on this machine kind: overview and review under 300 ms (warm).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time

from starlette.testclient import TestClient

from bench.common import median, percentile, print_table, scratch_dir
from impyard.dataroot import init_home
from impyard.home import Home
from impyard.knowledge.change import Change, FileState, KnowledgeLimits
from impyard.knowledge.imps import create_imp, open_repo
from impyard.knowledge.integration.lane import Trailers, integrate
from impyard.knowledge.store.repo import main_commit
from impyard.settings import load_settings
from impyard.web.access.console import open_console
from impyard.web.access.listen import checked_listen
from impyard.web.serving.app import build_app

TARGET_MS = 300.0
IMPS = ("ada", "bob", "cyd")
NS = "n_7f3c91a2d0e4"


def run_id(n: int) -> str:
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(1_780_000_000 + n * 60))
    return f"run-{stamp}-{n:010x}"


def write_runs(home: Home, count: int) -> None:
    for n in range(count):
        rid = run_id(n)
        outcome = ("integrated", "integrated", "empty", "rejected", "quarantined")[n % 5]
        manifest = {
            "run_id": rid,
            "imp": IMPS[n % len(IMPS)],
            "task_id": f"task-{n}",
            "channel": None,
            "mode": "append",
            "base_commit": "0" * 40,
            "namespace": NS,
            "state": "finished",
            "checkpoint": outcome,
            "exit_code": 0,
            "started_at": "2026-07-11T12:00:00Z",
            "ended_at": "2026-07-11T12:00:42Z",
            "timings_ms": {"prepare": 80.0, "box": 40000.0, "checkpoint": 200.0},
        }
        home.run_dir(rid).mkdir(parents=True)
        home.manifest(rid).write_text(json.dumps(manifest))


def add_candidates(home: Home, count: int, first: int) -> None:
    """``count`` refused changes of imp ada (a file under organization/ in append mode)."""
    repo = open_repo(home, "ada")
    base = main_commit(repo)
    for n in range(first, first + count):
        rid = run_id(n)
        data = f"refused {n}\n".encode()
        change = Change(
            written={
                f"organization/refused-{n}.md": FileState(
                    blob=str(repo.create_blob(data)), size=len(data), executable=False
                )
            },
            deleted=set(),
        )
        result = integrate(
            home,
            "ada",
            change,
            base=base,
            namespace=NS,
            mode="append",
            limits=KnowledgeLimits(),
            trailers=Trailers("ada", rid, None, None, base, "append"),
        )
        manifest = json.loads(home.manifest(rid).read_text())
        manifest.update(
            imp="ada",
            checkpoint="rejected",
            candidate_ref=result.candidate_ref,
            validation_errors=[v.as_dict() for v in result.violations],
        )
        home.manifest(rid).write_text(json.dumps(manifest))


def measure(client: TestClient, path: str, samples: int) -> tuple[float, float, float]:
    start = time.perf_counter()
    assert client.get(path).status_code == 200
    first = (time.perf_counter() - start) * 1000
    times = []
    for _ in range(samples):
        start = time.perf_counter()
        answer = client.get(path)
        times.append((time.perf_counter() - start) * 1000)
        assert answer.status_code == 200, path
    return first, median(times), percentile(times, 0.9)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--candidates", type=int, default=50)
    parser.add_argument("--samples", type=int, default=15)
    options = parser.parse_args()
    root = scratch_dir("impyard-web-bench-")
    try:
        home = Home(root)
        init_home(home)
        for imp in IMPS:
            create_imp(home, imp)
        started = time.perf_counter()
        write_runs(home, options.runs)
        add_candidates(
            home, min(options.candidates, options.runs), options.runs - options.candidates
        )
        print(
            f"data root: {options.runs} runs, {options.candidates} candidates, "
            f"made in {time.perf_counter() - started:.1f} s",
            flush=True,
        )
        os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
        listen = checked_listen("127.0.0.1:0", allow_remote=False, tls_cert=None, tls_key=None)
        console = open_console(home, load_settings(root), listen)
        client = TestClient(build_app(console), base_url="http://127.0.0.1")
        client.get(f"/login?token={console.token}")
        rows = []
        for name, path in (("overview", "/"), ("review", "/review"), ("metrics", "/metrics")):
            first, mid, p90 = measure(client, path, options.samples)
            verdict = "-"
            if name != "metrics":
                verdict = "pass" if mid <= TARGET_MS else "FAIL"
            rows.append((name, f"{first:.0f}", f"{mid:.0f}", f"{p90:.0f}", verdict))
        print_table(
            f"console with {options.runs} runs (ms; target {TARGET_MS:.0f} warm)",
            ["page", "first", "median", "p90", "result"],
            rows,
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
