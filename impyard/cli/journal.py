"""``impyard journal``: the activity journal, filtered."""

from __future__ import annotations

import json

import typer

from impyard.cli._common import echo, initialized_home, print_json


def register(app: typer.Typer) -> None:
    @app.command("journal")
    def journal_command(
        ctx: typer.Context,
        imp: str | None = typer.Option(None, "--imp", help="Only this imp."),
        run: str | None = typer.Option(None, "--run", help="Only this run."),
        as_json: bool = typer.Option(False, "--json", help="One JSON document."),
    ) -> None:
        """Show journal events (pointers to runs and commits, never note bodies)."""
        from impyard.journal import Journal

        entries = Journal(initialized_home(ctx).journal).read(imp=imp, run=run)
        if as_json:
            print_json(entries)
            return
        for entry in entries:
            rest = {k: v for k, v in entry.items() if k not in ("ts", "event", "imp", "run")}
            detail = " ".join(f"{k}={json.dumps(v)}" for k, v in sorted(rest.items()))
            echo(
                f"{entry.get('ts', '')} {entry.get('event', '')} "
                f"imp={entry.get('imp', '-')} run={entry.get('run', '-')} {detail}".rstrip()
            )
