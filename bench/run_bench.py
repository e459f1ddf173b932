"""Run overhead: `impyard run` of a one-note box against a bare `docker run --rm` of the
same image doing the same write under the same runtime, side by side, at 0 / 10,000 /
100,000 records, under runc and under runsc (gVisor); and the same `impyard run` claiming
a ready box (``[box.warm]``), its pool refilled by the pool code between runs, untimed;
and the cold and the ready-box run handed to a running ``impyard serve`` (which keeps the
pool full; the run waits, untimed, for a ready box), as an owner's run is whenever serve
runs. Each warm run handed to serve is paired with a bare run of its own, and each side
starts once serve is at rest (a ready box, no other box of the data root): serve's
refill after a run is background work that would otherwise fall on whichever side came
next.

IMPYARD_BENCH_SIZES (default 0,10000,100000), IMPYARD_BENCH_REPS (default 9) and
IMPYARD_BENCH_RUNTIMES (default runc,runsc).
"""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from bench.common import (
    add_records,
    byte_compiled,
    impyard,
    median,
    print_table,
    remove_data_root,
    scratch_dir,
    timed,
)
from impyard.box.docker import engine
from impyard.box.spec import LABEL_ROOT, root_label
from impyard.home import Home
from impyard.serve.warmfill import fill_once, remove_pools

IMAGE = "impyard-box:latest"
NOTE = 'printf "a fact\\n" | impyard-note bench one-note --source https://example.com'
BARE = (
    'mkdir -p /k/records/bench && printf -- "---\\nid: n_000000000000_1\\n---\\na fact\\n"'
    " > /k/records/bench/one-note--n_000000000000_1.md"
)


def bare_run(target: Path, runtime: str) -> None:
    subprocess.run(
        [
            "docker",
            "run",
            "--rm",
            "--runtime",
            runtime,
            "--network",
            "none",
            "--user",
            "65532:65532",
            "-v",
            f"{target}:/k",
            IMAGE,
            "sh",
            "-c",
            BARE,
        ],
        check=True,
        capture_output=True,
    )


def impyard_run(home: Path) -> None:
    result = impyard(home, "run", "bench", "--prompt", "bench", "--command", NOTE, check=False)
    if result.returncode != 0:
        raise SystemExit(
            f"impyard run failed ({result.returncode}): {result.stdout}{result.stderr}"
        )


def setup(records: int, command: str | None = None, runtime: str = "runc") -> Path:
    """A data root with imp `bench` holding ``records`` notes (and its own command), whose
    boxes run under ``runtime``. The records are packed, as the lane's folds leave an imp
    (loose, each run's lane pass would fold some of them: an imp from before folds)."""
    from impyard.knowledge.integration.origin import publish_origin

    home = scratch_dir("impyard-runbench-")
    impyard(home, "init", env={"IMPYARD_INIT_RUNTIME": runtime})
    impyard(home, "deploy")
    impyard(home, "imp", "create", "bench", *(["--command", command] if command else []))
    if records:
        add_records(Home(home).repo("bench"), records, packed=True)
        publish_origin(Home(home), "bench")
    return home


def keep_warm(home: Path) -> None:
    """Give the imp a pool of one ready box; its first run (the warm-up) records its shape."""
    org = home / "policy" / "org.toml"
    org.write_text(org.read_text().replace("boxes = 0", "boxes = 1", 1))
    impyard(home, "deploy")


def warm_run(home: Path) -> float:
    """One timed `impyard run` on a ready box (the refill before it is not timed)."""

    fill_once(Home(home))
    return timed(functools.partial(impyard_run, home))


def run_totals(home: Path, warm: bool, handed: bool = False) -> list[float]:
    """The runs' own time (``timings_ms.total``: admission to finish, without the process's
    start-up and exit), of the warm runs or of the cold ones (handed to serve or driven
    in their own process), the warm-up excluded."""
    manifests = sorted((home / "runs").glob("*/manifest.json"))[1:]
    records = [json.loads(path.read_text()) for path in manifests]
    return [
        r["timings_ms"]["total"]
        for r in records
        if r.get("warm", False) is warm and r.get("handed", False) is handed
    ]


@contextmanager
def serving(home: Path) -> Iterator[None]:
    """``impyard serve`` on ``home`` (its pools and its run socket) until the block ends."""
    console = str(Path(sys.executable).parent / "impyard")
    proc = subprocess.Popen(
        [console, "--home", str(home), "serve"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(lambda: (home / "serve" / "run.sock").is_socket())
        yield
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)


def wait_until(ready: Callable[[], bool], seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not ready():
        if time.monotonic() > deadline:
            raise SystemExit("run bench: serve's run socket or ready box never came")
        time.sleep(0.01)


def settled(home: Path) -> bool:
    """Serve is at rest: its pool has a ready box and the engine holds no other box of
    this data root (the last run's box is removed, no refill is starting)."""
    ready = len(list((home / "warm").glob("*/*/ready")))
    label = f"{LABEL_ROOT}={root_label(home)}"
    boxes = engine.api().containers(all=True, filters={"label": label})
    return ready > 0 and len(boxes) == ready


def handed_warm_run(home: Path) -> float:
    """One timed `impyard run` handed to serve, once serve is settled."""
    wait_until(lambda: settled(home))
    return timed(functools.partial(impyard_run, home))


def settled_bare_run(home: Path, target: Path, runtime: str) -> float:
    """One timed bare run paired with a handed one, started once serve is settled too (its
    refill after the last run would otherwise fall on the bare side)."""
    wait_until(lambda: settled(home))
    return timed(functools.partial(bare_run, target, runtime))


def main() -> None:
    sizes = [int(s) for s in os.environ.get("IMPYARD_BENCH_SIZES", "0,10000,100000").split(",")]
    reps = int(os.environ.get("IMPYARD_BENCH_REPS", "9"))
    runtimes = os.environ.get("IMPYARD_BENCH_RUNTIMES", "runc,runsc").split(",")
    byte_compiled()
    rows = []
    for records in sizes:
        runc_ms: float | None = None
        for runtime in runtimes:
            home = setup(records, runtime=runtime)
            target = home / "bare-target"
            target.mkdir()
            os.chown(target, 65532, 65532)
            # Warm-up (excluded): the first run on a new base materializes its layer once.
            impyard_run(home)
            bare_run(target, runtime)
            bare, ours, warm, cold_handed = [], [], [], []
            with serving(home):  # no ready boxes yet: cold runs handed to serve
                for _ in range(reps):
                    bare.append(timed(functools.partial(bare_run, target, runtime)))
                    cold_handed.append(timed(functools.partial(impyard_run, home)))
            keep_warm(home)
            for _ in range(reps):
                bare.append(timed(functools.partial(bare_run, target, runtime)))
                ours.append(timed(functools.partial(impyard_run, home)))
                warm.append(warm_run(home))
            remove_pools(Home(home))
            handed, handed_bare = [], []
            with serving(home):
                for _ in range(reps):
                    handed_bare.append(settled_bare_run(home, target, runtime))
                    handed.append(handed_warm_run(home))
            totals = [median(run_totals(home, False)), median(run_totals(home, True))]
            totals.insert(1, median(run_totals(home, False, handed=True)))
            totals.append(median(run_totals(home, True, handed=True)))
            if runtime == "runc":
                runc_ms = median(ours)
            rows.append(
                (
                    records,
                    runtime,
                    f"{median(bare):.0f}",
                    f"{median(ours):.0f}",
                    f"{median(ours) / median(bare):.2f}x",
                    f"{median(ours) / runc_ms:.2f}x" if runc_ms else "-",
                    f"{median(cold_handed):.0f}",
                    f"{median(cold_handed) / median(bare):.2f}x",
                    f"{median(warm):.0f}",
                    f"{median(warm) / median(bare):.2f}x",
                    f"{median(handed):.0f}",
                    f"{median(handed_bare):.0f}",
                    f"{median(handed) / median(handed_bare):.2f}x",
                    " / ".join(f"{total:.0f}" for total in totals),
                )
            )
            remove_data_root(home)
    print_table(
        f"impyard run (one note) vs bare docker run --rm of the same runtime, median of {reps}",
        (
            "records",
            "runtime",
            "docker run ms",
            "impyard run ms",
            "ratio",
            "vs runc",
            "cold via serve ms",
            "ratio",
            "warm run ms",
            "warm ratio",
            "warm via serve ms",
            "its bare ms",
            "via serve ratio",
            "run's own ms cold / cold via serve / warm / warm via serve",
        ),
        rows,
    )


if __name__ == "__main__":
    main()
