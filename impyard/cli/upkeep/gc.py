"""``impyard gc``: apply the org ``[retention]`` policy, or show what it would remove."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from impyard.cli.shared._common import echo, initialized_home, print_json

if TYPE_CHECKING:
    from impyard.retention.model import GcItem


def register(app: typer.Typer) -> None:
    @app.command("gc")
    def gc_command(
        ctx: typer.Context,
        dry_run: bool = typer.Option(
            False, "--dry-run", help="List exactly what would go; change nothing."
        ),
        as_json: bool = typer.Option(False, "--json", help="One JSON document."),
    ) -> None:
        """Remove old quarantines, candidates, finished runs and tasks, unneeded checkout
        layers, volumes and trust bundles, expired archived bodies; fold a backlog of loose
        git objects; rotate a large journal."""
        from impyard.retention.apply import run_gc

        result = run_gc(initialized_home(ctx), dry_run=dry_run)
        if as_json:
            print_json(result.to_dict())
        elif dry_run:
            for item in result.plan.items:
                verb = _VERBS.get(item.kind, "would remove")
                echo(f"{verb} {item.kind} {_label(item)} ({item.reason})")
        else:
            for outcome in result.outcomes:
                why = outcome.item.reason if outcome.status == "removed" else outcome.detail
                echo(f"{outcome.status} {outcome.item.kind} {_label(outcome.item)} ({why})")
        if not as_json:
            for note in [*result.plan.notes, *result.notes]:
                echo(f"note: {note}")
            echo(result.summary())
        if result.failed:
            raise typer.Exit(1)


_VERBS = {"journal": "would rotate", "loose_objects": "would fold"}


def _label(item: GcItem) -> str:
    if item.kind == "layer":
        return f"{item.imp}/{item.id}"
    if item.kind == "helper":
        return f"{item.path} {item.id[:12]}"
    if item.kind in ("volume", "archive_object", "task", "loose_objects"):
        return item.id
    return item.path
