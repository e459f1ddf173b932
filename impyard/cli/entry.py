"""The console entry point: keeps the cyclic GC off while a command starts, then runs the CLI.

Why: a command's start-up imports typer, pydantic and pygit2, which allocate tens of
thousands of long-lived objects, and the collector traverses every one of them at least
once while they load: 7 collections and 15-70 ms of a one-note ``impyard run`` even with
a first threshold of 10,000 (the total hardly depends on the threshold). Those objects
live as long as the process, so the collector is off at first. A command still running
``COLLECTOR_AFTER_SECONDS`` later (a long run, ``serve``) gets it back, with everything
allocated so far frozen (``gc.freeze``: never traversed again), and a higher first
threshold; a command ending sooner never collects, and its memory goes with it.

The process then ends with ``os._exit`` once its output is flushed, its non-daemon
threads are joined and every ``atexit`` hook has run (the backup drain, the engine
connection pool, logging): the interpreter's own teardown, which deallocates every
module and object one by one, cost 40-60 ms of each command and does nothing the
operating system does not do when the process ends. Every file Impyard writes is
closed (and synced where it matters) by the code that wrote it, never left to that
teardown.
"""

from __future__ import annotations

import atexit
import gc
import os
import sys
import threading

_GEN0_THRESHOLD = 10_000
COLLECTOR_AFTER_SECONDS = 2.0


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
    args = sys.argv[1:]
    if "run" in args[:3]:
        # A foreground run a running serve can take: handed over before typer loads.
        from impyard.cli.running.handoff import handed_off

        handed = handed_off(args)
        if isinstance(handed, int):
            end_process(handed)
            return
        args = handed
    defer_collector(COLLECTOR_AFTER_SECONDS)
    from impyard.cli.main import main as run_cli

    try:
        run_cli(args)
        code = 0
    except SystemExit as exc:
        code = exit_status(exc.code)
    end_process(code)


def defer_collector(seconds: float) -> threading.Timer:
    """Turn the cyclic GC off now and back on after ``seconds``, with what was allocated
    until then frozen. The timer is a daemon: a command that ends sooner does not wait."""
    gc.disable()
    gc.set_threshold(_GEN0_THRESHOLD, 20, 100)
    timer = threading.Timer(seconds, _collector_on)
    timer.daemon = True
    timer.start()
    return timer


def _collector_on() -> None:
    gc.freeze()
    gc.enable()


def exit_status(code: object) -> int:
    """The status ``sys.exit(code)`` gives the process (None is 0; a message is 1, printed)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    sys.stderr.write(f"{code}\n")
    return 1


def end_process(code: int) -> None:
    """What normal interpreter exit does that matters, then ``os._exit``."""
    for thread in threading.enumerate():
        if not thread.daemon and thread is not threading.main_thread():
            thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            code = code or 120  # as Python does when flushing stdout at exit fails
    os._exit(code)
