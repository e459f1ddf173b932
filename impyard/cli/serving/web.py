"""``impyard web``: the owner's console and ``/metrics``. Thin: the app lives in
``impyard.web`` and is imported only when this command runs (it brings Starlette,
uvicorn, Jinja2 and prometheus_client, which no other command needs)."""

from __future__ import annotations

from pathlib import Path

import typer

from impyard.cli.shared._common import echo, initialized_home, state

LISTEN_HELP = (
    "Address to listen on, HOST:PORT (default 127.0.0.1:8470); with --print-url, the "
    "address whose login URL to print (default: the running console's)."
)


def register(app: typer.Typer) -> None:
    @app.command("web")
    def web_command(
        ctx: typer.Context,
        listen: str | None = typer.Option(None, "--listen", help=LISTEN_HELP),
        allow_remote: bool = typer.Option(
            False, "--allow-remote", help="Allow a non-loopback address (needs --tls-*)."
        ),
        tls_cert: Path | None = typer.Option(None, "--tls-cert", help="TLS certificate (PEM)."),
        tls_key: Path | None = typer.Option(None, "--tls-key", help="TLS private key (PEM)."),
        metrics_public: bool = typer.Option(
            False, "--metrics-public", help="Serve /metrics without a login (for scrapers)."
        ),
        print_url: bool = typer.Option(
            False, "--print-url", help="Print the login URL (with the token) and exit."
        ),
    ) -> None:
        """Serve the console: overview, runs, review, knowledge, and /metrics."""
        import dataclasses

        from impyard.web.access.listen import DEFAULT_LISTEN, checked_listen, login_url
        from impyard.web.access.token import ensure_token
        from impyard.web.serving.address import ConsoleRecord, running_console_url

        home = initialized_home(ctx)
        where = checked_listen(
            listen or DEFAULT_LISTEN,
            allow_remote=allow_remote,
            tls_cert=tls_cert,
            tls_key=tls_key,
            metrics_public=metrics_public,
        )
        # Made here for a data root older than the console (`init` makes it now).
        token = ensure_token(home.web_token)
        if print_url:
            # Without --listen, where the console runs now (it may not be the default).
            running = running_console_url(home) if listen is None else None
            echo(login_url(running or where, token))
            return
        from impyard.web.access.console import Console
        from impyard.web.serving.server import bind, bound_port, serve_forever

        sock = bind(where)
        where = dataclasses.replace(where, port=bound_port(sock))
        # Recorded before the line: whoever read the line finds the record.
        record = ConsoleRecord(home, where)
        echo(f"console: {where.url} (log in: {login_url(where, token)})")
        try:
            serve_forever(Console(home, state(ctx).settings, where, token), sock)
        finally:
            record.close()
