"""``impyard serve``: thin; the worker lives in ``impyard.serve.worker``, its lines in
``impyard.cli.serving.serve_lines``."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from impyard.cli.shared._common import error, initialized_home, state, warn

#: ``serve --once``'s exit status when a task ended failed (no run outcome).
FAILED_TASKS_EXIT = 1


def register(app: typer.Typer) -> None:
    @app.command("serve")
    def serve_command(
        ctx: typer.Context,
        concurrency: int | None = typer.Option(
            None, "--concurrency", min=1, help="Boxes at once (default: settings, 2 per core)."
        ),
        once: bool = typer.Option(
            False, "--once", help="Drain the queue, then exit (1 when a task failed)."
        ),
        web: str | None = typer.Option(
            None, "--web", metavar="ADDR", help="Also serve the console on ADDR (HOST:PORT)."
        ),
        allow_remote: bool = typer.Option(
            False, "--allow-remote", help="With --web: allow a non-loopback address."
        ),
        tls_cert: Path | None = typer.Option(None, "--tls-cert", help="With --web: TLS cert."),
        tls_key: Path | None = typer.Option(None, "--tls-key", help="With --web: TLS key."),
        metrics_public: bool = typer.Option(
            False, "--metrics-public", help="With --web: /metrics without a login."
        ),
    ) -> None:
        """Run queued tasks; SIGINT/SIGTERM stop gracefully, a second signal kills boxes."""
        import logging
        from datetime import UTC, datetime

        from impyard.cli.running.run_server import started_serving
        from impyard.cli.serving.serve_lines import LineWriter, event_line, start_line, stop_line
        from impyard.cluster.plane.serving import start_cluster
        from impyard.journal.log import Journal
        from impyard.runs.drive.context import RunContext
        from impyard.serve.record import recorded, sole_serve
        from impyard.serve.signals import stop_signals
        from impyard.serve.warmfill import PoolKeeper
        from impyard.serve.worker import ServeEvent, Server, ServeStatus
        from impyard.status.serve_start import serve_start

        home = initialized_home(ctx)
        settings = state(ctx).settings
        # First of all: a second serve on this data root says so and does nothing.
        with sole_serve(home):
            from impyard.preflight import imps_refused

            for refusal in imps_refused(home):
                warn(refusal)
            console = None
            if web is not None:
                # Checked and bound before any task starts: a bad address fails serve at once.
                from impyard.web.serving.background import start_console

                console = start_console(
                    home,
                    settings,
                    web,
                    allow_remote=allow_remote,
                    tls_cert=tls_cert,
                    tls_key=tls_key,
                    metrics_public=metrics_public,
                )
            logging.basicConfig(level=logging.WARNING, format="impyard: %(levelname)s: %(message)s")
            # The same lines with or without a terminal (a log or journalctl gets exactly
            # those); a terminal also gets the live status line.
            lines = LineWriter(sys.stdout, tty=sys.stdout.isatty())

            def report(event: ServeEvent, status: ServeStatus) -> None:
                lines.put(event_line(event), status)

            workers = concurrency or settings.concurrency
            run_ctx = RunContext(settings=settings, journal=Journal(home.journal))
            cluster = start_cluster(home, run_ctx)
            server = Server(run_ctx, workers, once, report)
            # A foreground `impyard run` hands its run over the run socket to a serve that
            # stays (not `--once`, which would leave it mid-run).
            handed = None if once else started_serving(home, settings, server.ctx.journal, warn)

            def request_stop(by: str) -> None:
                if handed is not None:
                    handed.request_stop()
                server.request_stop(by)

            # Ready boxes only for a serve that stays: `--once` would start boxes to drop them.
            def busy() -> bool:
                """Tasks waiting or runs going (status: refreshed by each turn of serve's
                loop): a pool is filled once serve is idle."""
                status = server.status
                return status.queued + status.running + (handed.active if handed else 0) > 0

            pools = None if once else PoolKeeper(home, settings.disk_reserve_bytes, busy)

            try:
                # `impyard status` finds a live serve by this record's lock, a dead one's stale.
                with (
                    stop_signals(request_stop),
                    recorded(home, server.concurrency, once=once),
                ):
                    try:
                        lines.put(
                            start_line(serve_start(home, workers, once=once), datetime.now(UTC))
                        )
                        if pools is not None:
                            pools.start()
                        final = server.serve()
                    finally:
                        # Still under the stop signals: a second signal while the handed runs
                        # and the pools wind down kills their boxes, where the default action
                        # would end serve before their spaces are unmounted.
                        if handed is not None:
                            handed.stop(settings.shutdown_grace_seconds)
                        if pools is not None:
                            pools.stop()
                lines.put(stop_line(final, datetime.now(UTC)))
            finally:
                lines.close()
                if console is not None:
                    console.stop()
                if cluster is not None:
                    cluster.close()
        failed = final.counts["failed"]
        if once and failed:
            # A drained queue is not a clean one: a script must see a task that never ran.
            error(
                f"{failed} task(s) failed: `impyard task list --state failed` "
                "says why, `impyard task retry TASK` queues one again"
            )
            raise typer.Exit(FAILED_TASKS_EXIT)
