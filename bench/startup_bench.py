"""Start-up budget: how long the commands an owner or a script types most often take
before they do any work, beside ``python -c pass`` in the same run.

    python -m bench.startup_bench [--reps 15]

Budget on this machine kind: ``impyard --version`` ≤ 80 ms and ``impyard runs list``
(a data root with a few runs) ≤ 250 ms, wall clock of the console command, median.
Also prints the heaviest imports of ``runs list`` (``python -X importtime``), so a
regression names its cause.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from bench.common import byte_compiled, impyard, median, print_table, scratch_dir

BUDGETS_MS = {"impyard --version": 80.0, "impyard runs list": 250.0}


def wall_ms(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, env=env, check=True, capture_output=True)
    return (time.perf_counter() - start) * 1000


def heaviest_imports(argv: list[str], env: dict[str, str], top: int = 8) -> list[tuple[str, int]]:
    result = subprocess.run(
        [sys.executable, "-X", "importtime", *argv], env=env, capture_output=True, text=True
    )
    found: list[tuple[str, int]] = []
    for line in result.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _self, cumulative, name = (part.strip() for part in line[12:].split("|"))
        if not name.startswith(" "):  # top-level imports only (nested ones are indented)
            found.append((name.strip(), int(cumulative)))
    found = [(n, us) for n, us in found if not n.startswith("encodings")]
    return sorted(found, key=lambda item: -item[1])[:top]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=15)
    args = parser.parse_args(sys.argv[1:])
    byte_compiled()
    console = shutil.which("impyard") or ""
    if not console:
        raise SystemExit("startup bench: the impyard console command is not on PATH")
    scratch = scratch_dir("impyard-startup-")
    try:
        report(args.reps, console, scratch / "home")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def report(reps: int, console: str, home: Path) -> None:
    """Time the commands on a fresh data root at ``home`` and print the tables."""
    impyard(home, "init")
    env = {**os.environ, "IMPYARD_HOME": str(home)}
    commands = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "impyard --version": [console, "--version"],
        "impyard runs list": [console, "runs", "list"],
    }
    samples: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(reps):  # interleaved: drift falls on every command alike
        for name, argv in commands.items():
            samples[name].append(wall_ms(argv, env))
    baseline = median(samples["python -c pass"])
    rows = []
    for name, values in samples.items():
        budget = BUDGETS_MS.get(name)
        ms = median(values)
        verdict = "-" if budget is None else ("pass" if ms <= budget else "FAIL")
        rows.append(
            (name, f"{ms:.1f}", f"{ms - baseline:+.1f}", "-" if budget is None else budget, verdict)
        )
    print_table(
        f"start-up, median of {reps} (ms)",
        ["command", "wall ms", "vs python -c pass", "budget", "result"],
        rows,
    )
    heavy = heaviest_imports(["-m", "impyard", "runs", "list"], env)
    print_table(
        "heaviest top-level imports of `runs list` (cumulative ms)",
        ["module", "ms"],
        [(name, f"{us / 1000:.1f}") for name, us in heavy],
    )


if __name__ == "__main__":
    main()
