"""``impyard memory <imp> add|list|recall|forget``, ``memory migrate`` and ``impyard notes``.

The imp comes before the sub-command (``impyard memory yuko add ...``), so both
groups use ``ImpFirstGroup``: a first word that is not one of the group's own
commands names an imp. The one clash — an imp literally named ``migrate`` — is
settled by the next word: ``memory migrate list`` lists imp "migrate"'s memory,
``memory migrate [IMP]`` migrates.

``impyard notes`` is the deprecated, read-only alias: list and recall behave as
under ``impyard memory``; writes are refused with a pointer to ``impyard memory``.
"""

from __future__ import annotations

from typing import Any

import typer
from typer.core import TyperGroup

from impyard.cli.shared import complete
from impyard.cli.shared._common import echo, initialized_home, print_json, warn
from impyard.common.errors import UsageError
from impyard.home import Home
from impyard.memory.block import DEFAULT_MAX_CHARS, render_block
from impyard.memory.entry import DEFAULT_KIND, KINDS, MemoryEntry
from impyard.memory.migrate import Migration, migrate, migrate_all
from impyard.memory.select import DEFAULT_LIMIT, select_entries
from impyard.memory.store import MemoryRead, add_entry, forget_entry, read_memory, require_imp

IMP_SLOT = "IMP"
NOTES_HINT = "`impyard notes` is deprecated: use `impyard memory` (notes is a read-only alias)"


class ImpFirstGroup(TyperGroup):
    """A group whose first word is an imp name unless it is one of the group's own commands."""

    # ``ctx`` is click's Context; typed loosely because typer may vendor click or depend on it.
    def resolve_command(self, ctx: Any, args: list[str]) -> tuple[str | None, Any, list[str]]:
        per_imp = self.commands[IMP_SLOT]
        first = args[0] if args else ""
        own = first in self.commands and first != IMP_SLOT
        if own and len(args) > 1 and args[1] in getattr(per_imp, "commands", {}):
            own = False  # `memory migrate list`: an imp named like a group command
        if own or not first or first.startswith("-"):
            return super().resolve_command(ctx, args)
        # The imp rides as the sub-group's name, so usage reads `impyard memory yuko add`.
        return first, per_imp, args[1:]

    def shell_complete(self, ctx: Any, incomplete: str) -> list[Any]:
        """The group's commands and options, then imp names (the first word's other use);
        never the slot the imp rides in."""
        own = [item for item in super().shell_complete(ctx, incomplete) if item.value != IMP_SLOT]
        return [*own, *complete.imp_suggestions(ctx, incomplete)]


def _imp(ctx: typer.Context) -> str:
    """The imp named before the sub-command (the per-imp group's invocation name)."""
    parent = ctx.parent
    if parent is None or not parent.info_name:  # pragma: no cover - ImpFirstGroup always names it
        raise UsageError("name an imp: impyard memory <imp> <command>")
    return parent.info_name


def _home_and_imp(ctx: typer.Context) -> tuple[Home, str]:
    home = initialized_home(ctx)
    return home, require_imp(home, _imp(ctx))


def _read(ctx: typer.Context) -> tuple[str, MemoryRead]:
    home, imp = _home_and_imp(ctx)
    read = read_memory(home, imp)
    for warning in read.warnings:
        warn(str(warning))
    if read.legacy:
        warn(f"reading legacy {read.path}; move it with `impyard memory migrate {imp}`")
    if read.shadowed_legacy is not None:
        warn(
            f"legacy {read.shadowed_legacy} is not read because memory/ has a file; "
            f"merge it with `impyard memory migrate {imp}`"
        )
    return imp, read


def _summary(entry: MemoryEntry) -> str:
    scope = f"#{entry.channel}" if entry.channel else "imp-wide"
    text = entry.text.replace("\\", "\\\\").replace("\n", "\\n")
    return f"{entry.id}  {entry.ts or '-'}  {entry.kind}  {scope}  {entry.user or '-'}  {text}"


JSON_OPTION = typer.Option(False, "--json", help="Print one JSON document.")
CHANNEL_HELP = "Only this channel's entries."


def list_command(
    ctx: typer.Context,
    channel: str | None = typer.Option(None, "--channel", help=CHANNEL_HELP),
    as_json: bool = JSON_OPTION,
) -> None:
    """List an imp's memory entries in stored order (oldest first)."""
    _, read = _read(ctx)
    entries = [e for e in read.entries if channel is None or e.channel == channel]
    if as_json:
        print_json([e.to_json() for e in entries])
        return
    for entry in entries:
        echo(_summary(entry))


def recall_command(
    ctx: typer.Context,
    query: str | None = typer.Argument(
        None, help="Keep entries containing this text (case-insensitive)."
    ),
    channel: str | None = typer.Option(
        None, "--channel", help="The run's channel: its entries first, then imp-wide ones."
    ),
    limit: int = typer.Option(DEFAULT_LIMIT, "--limit", min=1, help="At most this many."),
    block: bool = typer.Option(
        False, "--block", help="Print the selection as the Memory block a run's task gets."
    ),
    max_chars: int = typer.Option(
        DEFAULT_MAX_CHARS, "--max-chars", min=0, help="Size bound of --block."
    ),
    as_json: bool = JSON_OPTION,
) -> None:
    """Show what a run in CHANNEL would receive: that channel's entries, then imp-wide ones.

    Without --channel only imp-wide entries qualify. Entries of other channels never do.
    """
    _, read = _read(ctx)
    entries = select_entries(read.entries, channel, query=query, limit=limit)
    if as_json:
        print_json([e.to_json() for e in entries])
    elif block:
        typer.echo(render_block(entries, max_chars), nl=False)
    else:
        for entry in entries:
            echo(_summary(entry))


def add_command(
    ctx: typer.Context,
    text: str = typer.Argument(..., help="What to remember (at most 8 KiB)."),
    channel: str | None = typer.Option(
        None, "--channel", help="The channel it belongs to; omit for an imp-wide entry."
    ),
    user: str | None = typer.Option(None, "--user", help="The user it is about or from."),
    kind: str = typer.Option(DEFAULT_KIND, "--kind", help=f"One of: {', '.join(KINDS)}."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Remember TEXT for an imp; prints the new entry's id."""
    home, imp = _home_and_imp(ctx)
    added = add_entry(home, imp, text, channel=channel, user=user, kind=kind)
    if added.migration is not None:
        warn(f"moved legacy notes/{imp}.jsonl into memory/ before writing")
    if as_json:
        print_json(added.entry.to_json())
    else:
        echo(added.entry.id)


def forget_command(
    ctx: typer.Context,
    entry_id: str = typer.Argument(..., metavar="ID", help="The entry's id (see `list`)."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Remove one entry for good (the file is rewritten atomically)."""
    home, imp = _home_and_imp(ctx)
    gone = forget_entry(home, imp, entry_id)
    if as_json:
        print_json(gone.to_json())
    else:
        echo(f"forgot {gone.id}")


def _migration_line(migration: Migration) -> str:
    if migration.action == "nothing":
        return f"{migration.imp}: no legacy notes file"
    extra = ""
    if migration.duplicates:
        extra += f", {migration.duplicates} already present"
    if migration.unreadable:
        extra += f", {migration.unreadable} unreadable line(s) kept verbatim"
    return f"{migration.imp}: {migration.action} {migration.entries} entries into memory/{extra}"


def migrate_command(
    ctx: typer.Context,
    imp: str | None = typer.Argument(
        None,
        help="Only this imp (default: every legacy file).",
        autocompletion=complete.imps,
    ),
    as_json: bool = JSON_OPTION,
) -> None:
    """Move legacy notes/<imp>.jsonl files into memory/ (merging, never clobbering)."""
    home = initialized_home(ctx)
    migrations = [migrate(home, imp)] if imp is not None else migrate_all(home)
    if as_json:
        print_json([m.to_json() for m in migrations])
        return
    if not migrations:
        echo("no legacy notes files")
    for migration in migrations:
        echo(_migration_line(migration))


_SWALLOW_ARGS = {"allow_extra_args": True, "ignore_unknown_options": True}


def _refuse_write(ctx: typer.Context) -> None:
    # Writes through the alias would split an imp's memory across two names.
    command = ctx.info_name or "add"
    if command == "migrate":
        where = "impyard memory migrate"
    else:
        imp = ctx.parent.info_name if ctx.parent is not None else None
        where = f"impyard memory {imp or '<imp>'} {command}"
    raise UsageError(f"`impyard notes` is read-only; use `{where}`")


def _refusing(app: typer.Typer, name: str) -> None:
    app.command(name, context_settings=_SWALLOW_ARGS, hidden=True, add_help_option=False)(
        _refuse_write
    )


def _per_imp_app(*, writable: bool) -> typer.Typer:
    app = typer.Typer(no_args_is_help=True)

    @app.callback()
    def per_imp() -> None:
        """Add, list, recall or forget one imp's interaction memory."""

    app.command("list")(list_command)
    app.command("recall")(recall_command)
    if writable:
        app.command("add")(add_command)
        app.command("forget")(forget_command)
    else:
        _refusing(app, "add")
        _refusing(app, "forget")
    return app


def register(app: typer.Typer) -> None:
    memory_app = typer.Typer(cls=ImpFirstGroup, no_args_is_help=True)

    @memory_app.callback()
    def memory() -> None:
        """An imp's interaction memory: impyard memory IMP add|list|recall|forget ..."""

    memory_app.add_typer(_per_imp_app(writable=True), name=IMP_SLOT)
    memory_app.command("migrate")(migrate_command)
    app.add_typer(memory_app, name="memory")

    notes_app = typer.Typer(cls=ImpFirstGroup, no_args_is_help=True)

    @notes_app.callback()
    def notes() -> None:
        """Deprecated read-only alias of `impyard memory` (list, recall)."""
        warn(NOTES_HINT)

    notes_app.add_typer(_per_imp_app(writable=False), name=IMP_SLOT)
    _refusing(notes_app, "migrate")
    app.add_typer(notes_app, name="notes", hidden=True)
