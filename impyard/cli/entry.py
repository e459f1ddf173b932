"""The console entry point: tunes the cyclic GC for a short-lived command, then runs the CLI.

Why: a command's start-up imports typer, pydantic and pygit2, which
allocate hundreds of thousands of long-lived objects. With the default thresholds the
collector rescans them many times while they load, and the interpreter's final
collection scans them all again on exit: together 70-100 ms of a ~0.4 s command
(measured on the CI machine kind). Freezing at exit moves every object out of the
collector's sight; the higher first threshold leaves long-running commands (serve)
with a working collector.
"""

from __future__ import annotations

import atexit
import gc
import os
import sys

_GEN0_THRESHOLD = 10_000


def main() -> None:
    if sys.argv[1:] == ["--version"]:
        # Scripts and packagers ask this often: answer before typer and pydantic load.
        from impyard import __version__

        sys.stdout.write(f"impyard {__version__}\n")
        return
    # Impyard's models are its own: pydantic's plugin discovery (importlib.metadata
    # and a scan of every installed distribution, ~20 ms) finds nothing to apply to
    # them. An owner's explicit setting still wins.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    gc.set_threshold(_GEN0_THRESHOLD, 20, 100)
    atexit.register(gc.freeze)
    from impyard.cli.main import main as run_cli

    run_cli()
