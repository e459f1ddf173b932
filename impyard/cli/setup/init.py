"""``impyard init``: create the data root (idempotent)."""

from __future__ import annotations

import typer

from impyard.cli.shared._common import echo, state


def register(app: typer.Typer) -> None:
    @app.command("init")
    def init_command(ctx: typer.Context) -> None:
        """Create the data root with the default owner policy (safe to run again)."""
        # Here, not at the top: every command loads this module, and the policy compiler
        # (pydantic models) and the queue store only matter to `init`.
        from impyard.dataroot import init_home

        home = state(ctx).home
        created = init_home(home)
        verb = "created" if created else "already initialized"
        echo(f"{verb}: {home.root}")
