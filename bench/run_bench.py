"""Run overhead: `impyard run` of a one-note box against a bare `docker run --rm` of the
same image doing the same write, side by side, at 0 / 10,000 / 100,000 records.

IMPYARD_BENCH_SIZES (default 0,10000,100000) and IMPYARD_BENCH_REPS (default 9).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from pathlib import Path

from bench.common import (
    add_records,
    byte_compiled,
    impyard,
    median,
    print_table,
    scratch_dir,
    timed,
)
from impyard.home import Home

IMAGE = "impyard-box:latest"
NOTE = 'printf "a fact\\n" | impyard-note bench one-note --source https://example.com'
BARE = (
    'mkdir -p /k/records/bench && printf -- "---\\nid: n_000000000000_1\\n---\\na fact\\n"'
    " > /k/records/bench/one-note--n_000000000000_1.md"
)


def bare_run(target: Path) -> None:
    subprocess.run(
        [
            "docker",
            "run",
            "--rm",
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


def setup(records: int, command: str | None = None) -> Path:
    """A data root with imp `bench` holding ``records`` notes (and its own command)."""
    from impyard.knowledge.origin import publish_origin

    home = scratch_dir("impyard-runbench-")
    impyard(home, "init")
    impyard(home, "deploy")
    impyard(home, "imp", "create", "bench", *(["--command", command] if command else []))
    if records:
        add_records(Home(home).repo("bench"), records)
        publish_origin(Home(home), "bench")
    return home


def main() -> None:
    sizes = [int(s) for s in os.environ.get("IMPYARD_BENCH_SIZES", "0,10000,100000").split(",")]
    reps = int(os.environ.get("IMPYARD_BENCH_REPS", "9"))
    byte_compiled()
    rows = []
    for records in sizes:
        home = setup(records)
        target = home / "bare-target"
        target.mkdir()
        os.chown(target, 65532, 65532)
        # Warm-up (excluded): the first run on a new base materializes its layer once.
        impyard_run(home)
        bare_run(target)
        bare, ours = [], []
        for _ in range(reps):
            bare.append(timed(functools.partial(bare_run, target)))
            ours.append(timed(functools.partial(impyard_run, home)))
        rows.append(
            (
                records,
                f"{median(bare):.0f}",
                f"{median(ours):.0f}",
                f"{median(ours) / median(bare):.2f}x",
            )
        )
        shutil.rmtree(home, ignore_errors=True)
    print_table(
        f"impyard run (one note) vs bare docker run --rm, median of {reps}",
        ("records", "docker run ms", "impyard run ms", "ratio"),
        rows,
    )


if __name__ == "__main__":
    main()
