"""``python -m tests.helpers.crash <point> <impyard args>``: the real CLI, SIGKILLed (the
host dies, as with a power cut) at ``point`` of the first mid-run checkpoint:

    before-ref   the checkpoint's commit is written, main not yet moved
    after-ref    main moved, the manifest not yet told

The box keeps running; recovery in a fresh process must finish the run.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Any

from impyard.knowledge import lane


def _mid_run() -> bool:
    # Mid-run checkpoints run on the gateway's connection threads; the exit one does not.
    return threading.current_thread().name == "gateway-conn"


def main() -> None:
    point, argv = sys.argv[1], sys.argv[2:]
    if point not in ("before-ref", "after-ref"):
        raise SystemExit(f"unknown crash point {point!r}")
    original = lane._compare_and_swap_main

    def dying(*args: Any) -> None:
        if _mid_run() and point == "before-ref":
            os.kill(os.getpid(), signal.SIGKILL)
        original(*args)
        if _mid_run() and point == "after-ref":
            os.kill(os.getpid(), signal.SIGKILL)

    lane._compare_and_swap_main = dying  # type: ignore[assignment]
    from impyard.cli.main import main as cli_main

    cli_main(argv)


if __name__ == "__main__":
    main()
