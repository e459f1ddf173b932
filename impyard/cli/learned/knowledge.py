"""``impyard knowledge <imp>`` (the repo path), ``impyard knowledge provenance``,
``impyard knowledge check`` and ``impyard knowledge purge``.

``knowledge <imp>`` predates the sub-commands, and scripts rely on it printing the
path and nothing else, so the group reads its first word as an imp unless it is
``provenance``, ``check`` or ``purge`` followed by more words: an imp literally named
``provenance`` still gets its path from ``impyard knowledge provenance``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer
from typer.core import TyperGroup

from impyard.cli.learned.purge import purge_command
from impyard.cli.shared import complete
from impyard.cli.shared._common import echo, initialized_home, print_json
from impyard.common.errors import UsageError

if TYPE_CHECKING:
    from impyard.gateway.provenance.receipts import Receipt
    from impyard.knowledge.validation.provenance import NoteProvenance

PATH_SLOT = "IMP"


class ImpOrCommandGroup(TyperGroup):
    """A group whose first word is an imp (whose path is printed) unless it starts one of
    the group's own commands."""

    # ``ctx`` is click's Context; typed loosely because typer may vendor click or depend on it.
    def resolve_command(self, ctx: Any, args: list[str]) -> tuple[str | None, Any, list[str]]:
        first = args[0] if args else ""
        # While a shell completes (resilient parsing) `knowledge provenance` is that command.
        more = len(args) > 1 or ctx.resilient_parsing
        own = first in self.commands and first != PATH_SLOT and more
        if own or not first or first.startswith("-"):
            return super().resolve_command(ctx, args)
        # The imp rides as the command's name, so usage reads `impyard knowledge yuko`.
        return first, self.commands[PATH_SLOT], args[1:]

    def shell_complete(self, ctx: Any, incomplete: str) -> list[Any]:
        """The group's commands and options, then imp names (the first word's other use)."""
        return [
            *super().shell_complete(ctx, incomplete),
            *complete.imp_suggestions(ctx, incomplete),
        ]


def path_command(ctx: typer.Context) -> None:
    """Print the imp's canonical bare repository path (and nothing else)."""
    from impyard.knowledge.imps import require_imp

    imp = ctx.info_name
    if not imp:  # pragma: no cover - ImpOrCommandGroup always names it
        raise UsageError("name an imp: impyard knowledge <imp>")
    home = initialized_home(ctx)
    if imp == "provenance" and not home.repo(imp).is_dir():
        raise UsageError("usage: impyard knowledge provenance <imp> <path> [--json]")
    echo(str(require_imp(home, imp).resolve()))


def provenance_command(
    ctx: typer.Context,
    imp: str = typer.Argument(..., help="Imp name.", autocompletion=complete.imps),
    path: str = typer.Argument(..., help="The note's path in the repository (records/...)."),
    as_json: bool = typer.Option(False, "--json", help="One JSON document on stdout."),
) -> None:
    """Show where a note on main came from.

    Its sources, the commit and run that landed it, and the receipts that commit records.
    """
    from impyard.knowledge.validation.provenance import note_provenance
    from impyard.runs.checkpoints.landing import run_receipts

    home = initialized_home(ctx)
    found = note_provenance(home, imp, path)
    logged = run_receipts(home, found.run) if found.run else {}
    report = _report(imp, found, logged)
    if as_json:
        print_json(report)
        return
    for line in _lines(report):
        echo(line)


def check_command(
    ctx: typer.Context,
    imp: str = typer.Argument(..., help="Imp name."),
    as_json: bool = typer.Option(False, "--json", help="One JSON document on stdout."),
) -> None:
    """Name every entry of the imp's knowledge the lane would never write.

    Main, candidates, quarantine, their history and every object, as a restore checks a
    backup (git fsck --strict's checks and the lane's rules). Exit 1 when anything is
    found: no run of the imp starts until main is fixed.
    """
    from impyard.knowledge.change import KnowledgeLimits
    from impyard.knowledge.gates.repogate import check_imp
    from impyard.policy.compile import policy_for_run

    home = initialized_home(ctx)
    policy, _ = policy_for_run(home, imp, strict=False)
    found = check_imp(home, imp, KnowledgeLimits.of(policy.knowledge))
    if as_json:
        print_json(
            {
                "imp": imp,
                "clean": not found,
                "problems": [problem.as_dict() for problem in found.found],
                "omitted": found.omitted,
            }
        )
    elif found:
        for line in found.lines():
            echo(line)
    else:
        echo(f"{imp}: clean")
    if found:
        raise typer.Exit(1)


def _report(imp: str, found: NoteProvenance, logged: dict[str, Receipt]) -> dict[str, Any]:
    return {
        "imp": imp,
        "path": found.path,
        "source_urls": found.source_urls,
        "source_receipts": found.source_receipts,
        "partial_receipts": found.partial_receipts,
        "commit": found.commit,
        "run": found.run,
        "independent_sources": found.independent_sources,
        "receipts": found.receipts(logged),
    }


def sources_line(count: int) -> str:
    """What a note's trust rests on, in words (the console says the same)."""
    if not count:
        return "no fetched source"
    plural = "s" if count > 1 else ""
    return f"{count} independent source{plural} (distinct hosts of its verified receipts)"


def _lines(report: dict[str, Any]) -> list[str]:
    lines = [
        f"path     {report['path']}",
        f"commit   {report['commit']}",
        f"run      {report['run'] or '-'}",
        f"trust    {sources_line(report['independent_sources'])}",
    ]
    lines.extend(f"source   {url}" for url in report["source_urls"])
    recorded = {row["id"] for row in report["receipts"]}
    lines.extend(
        f"receipt  {receipt} (no Source-Receipt trailer in the commit)"
        for receipt in report["source_receipts"]
        if receipt not in recorded
    )
    for row in report["receipts"]:
        partial = " partial (the fetch was cut short)" if row["partial"] else ""
        lines.append(f"receipt  {row['id']} {row['url']} sha256={row['sha256']}{partial}")
        if row["logged"]:
            lines.append(
                f"         status {row['status']}, {row['bytes']} bytes, "
                f"{row['content_type'] or 'no content type'}, fetched {row['ended_at']}"
            )
        else:
            lines.append("         (no longer in the run's receipts)")
    return lines


def register(app: typer.Typer) -> None:
    knowledge_app = typer.Typer(cls=ImpOrCommandGroup, no_args_is_help=True)

    @knowledge_app.callback()
    def knowledge() -> None:
        """An imp's knowledge: `impyard knowledge IMP` prints its canonical bare repository
        path; `impyard knowledge provenance IMP PATH` shows where a note came from;
        `impyard knowledge check IMP` names what the lane would never write;
        `impyard knowledge purge IMP ...` removes a leak from everywhere."""

    knowledge_app.command(PATH_SLOT, hidden=True)(path_command)
    knowledge_app.command("provenance")(provenance_command)
    knowledge_app.command("check")(check_command)
    knowledge_app.command("purge")(purge_command)
    app.add_typer(knowledge_app, name="knowledge")
