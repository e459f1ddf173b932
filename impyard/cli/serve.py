"""``impyard serve``: thin; the worker lives in ``impyard.runs.serve``."""

from __future__ import annotations

import signal
import sys
from types import FrameType

import typer

from impyard.cli._common import initialized_home, state


def register(app: typer.Typer) -> None:
    @app.command("serve")
    def serve_command(
        ctx: typer.Context,
        concurrency: int | None = typer.Option(
            None, "--concurrency", min=1, help="Boxes at once (default: settings, 2 per core)."
        ),
        once: bool = typer.Option(False, "--once", help="Drain the queue, then exit 0."),
    ) -> None:
        """Run queued tasks; SIGINT/SIGTERM stop gracefully, a second signal kills boxes."""
        import logging

        from impyard.journal import Journal
        from impyard.runs.pipeline import RunContext
        from impyard.runs.serve import ServeEvent, Server, ServeStatus
        from impyard.runs.serve_record import recorded

        home = initialized_home(ctx)
        settings = state(ctx).settings
        logging.basicConfig(level=logging.WARNING, format="impyard: %(levelname)s: %(message)s")
        tty = sys.stdout.isatty()

        def summary(status: ServeStatus) -> str:
            c = status.counts
            return (
                f"running {status.running}  queued {status.queued}  landed {c['integrated']}"
                f"  empty {c['empty']}  rejected {c['rejected']}  conflict {c['conflict']}"
                f"  quarantined {c['quarantined']}  failed {c['failed']}"
                + ("  (stopping)" if status.stopping else "")
                + ("  (engine down)" if status.engine_down else "")
            )

        def report(event: ServeEvent, status: ServeStatus) -> None:
            if tty:
                if event.message:
                    sys.stdout.write("\r\033[K" + event.message + "\n")
                sys.stdout.write("\r\033[K" + summary(status))
            elif event.message:
                sys.stdout.write(event.message + "\n")
            sys.stdout.flush()

        server = Server(
            RunContext(settings=settings, journal=Journal(home.journal)),
            concurrency or settings.concurrency,
            once,
            report,
        )

        def on_signal(signum: int, frame: FrameType | None) -> None:
            server.request_stop()

        signal.signal(signal.SIGINT, on_signal)
        signal.signal(signal.SIGTERM, on_signal)
        # `impyard status` finds a live serve by this record's lock, a dead one's left stale.
        with recorded(home, server.concurrency, once=once):
            final = server.serve()
        sys.stdout.write(("\r\033[K" if tty else "") + "done: " + summary(final) + "\n")
