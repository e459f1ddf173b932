"""Shell completion of values: imp names and recent run ids.

A completion runs on every Tab, before any command callback: the data root comes from the
parsed ``--home`` (or ``IMPYARD_HOME``) of the line being completed, nothing is created,
and any failure means no suggestions, never an error in the owner's shell. Every command
module names these callbacks, so what they read loads only when one is called.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer

from impyard.home import Home, resolve_home

#: The help of every argument that names a run (``runs.records.lookup.resolve_run`` reads it).
RUN_HELP = "The run: its id, a unique prefix of it, or 'last'."
#: Run ids offered at most (newest first), beside ``last``.
RUN_SUGGESTIONS = 30


def completion_home(ctx: typer.Context) -> Home:
    """The data root of the command line being completed (its root callback has not run)."""
    option = ctx.find_root().params.get("home")
    return Home(resolve_home(option if isinstance(option, Path) else None))


def imps(ctx: typer.Context, incomplete: str) -> list[str]:
    from impyard.knowledge.imps import list_imps

    try:
        return [name for name in list_imps(completion_home(ctx)) if name.startswith(incomplete)]
    except Exception:  # a completion never fails the shell; no data root, no suggestions
        return []


def runs(ctx: typer.Context, incomplete: str) -> list[tuple[str, str]]:
    """``last`` (when there is a run) and the newest run ids that begin with what is typed,
    each with its imp and state as help (shells that show help: zsh, fish)."""
    from impyard.runs.records import lookup
    from impyard.runs.records import manifest as manifests

    try:
        home = completion_home(ctx)
        ids = lookup.run_ids(home)
        last = bool(ids) and lookup.LAST.startswith(incomplete)
        offered = [(lookup.LAST, "the newest run")] if last else []
        ids = [run_id for run_id in ids if run_id.startswith(incomplete)]
        for run_id in ids[:RUN_SUGGESTIONS]:
            found = manifests.read_or_none(home, run_id)
            about = f"{found.imp} {found.state} {found.checkpoint}" if found else ""
            offered.append((run_id, about))
        return offered
    except Exception:  # a completion never fails the shell
        return []


@dataclass(frozen=True)
class Suggestion:
    """One completion as a group's own ``shell_complete`` returns it: the fields the shells'
    formatters read from click's ``CompletionItem`` (built here because typer may vendor
    click or depend on it)."""

    value: str
    help: str | None = None
    type: str = "plain"


def imp_suggestions(ctx: Any, incomplete: str) -> list[Suggestion]:
    """Imp names as the items of a group whose first word may be an imp."""
    return [Suggestion(name, "imp") for name in imps(ctx, incomplete)]
