"""`just bench`: every benchmark, one after another (`python -m bench [name ...]`)."""

from __future__ import annotations

import importlib
import sys

BENCHES = (
    "checkout_bench",
    "lane_bench",
    "bigchange_bench",
    "launch_bench",
    "run_bench",
    "serve_bench",
    "agent_bench",
    "control_bench",
    "backup_bench",
    "inspect_bench",
    "soak_bench",
    "startup_bench",
    "web_bench",
)


def main() -> None:
    chosen = sys.argv[1:] or list(BENCHES)
    unknown = [name for name in chosen if name not in BENCHES]
    if unknown:
        raise SystemExit(f"unknown bench {', '.join(unknown)}; choose from {', '.join(BENCHES)}")
    # Each bench reads its own options from sys.argv: the names chosen here are not theirs.
    sys.argv = sys.argv[:1]
    for name in chosen:
        module = importlib.import_module(f"bench.{name}")
        print(f"\n# {name}", flush=True)
        module.main()


if __name__ == "__main__":
    main()
