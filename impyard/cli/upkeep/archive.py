"""``impyard archive show``: a body the gateway stored in the source archive, as it was sent."""

from __future__ import annotations

import shutil
import sys

import typer

from impyard.cli.shared._common import initialized_home


def register(app: typer.Typer) -> None:
    archive_app = typer.Typer(help="The source archive of relayed bodies.", no_args_is_help=True)
    app.add_typer(archive_app, name="archive")

    @archive_app.command("show")
    def show_command(
        ctx: typer.Context,
        sha256: str = typer.Argument(..., help="The body's SHA-256 (a receipt's sha256)."),
    ) -> None:
        """Write the stored body to stdout, byte for byte (gzip stays gzip)."""
        from impyard.gateway.provenance.archive import Archive

        home = initialized_home(ctx)
        with Archive(home.archive_dir).open(sha256) as body:
            shutil.copyfileobj(body, sys.stdout.buffer)
        sys.stdout.buffer.flush()
