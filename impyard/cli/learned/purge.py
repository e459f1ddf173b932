"""``impyard knowledge purge``: the command line of ``impyard.purge`` (a preview with
``--dry-run``, the purge without)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import typer

from impyard.cli.shared import complete
from impyard.cli.shared._common import echo, initialized_home, print_json, warn
from impyard.common.errors import UsageError
from impyard.common.textsafe import visible

if TYPE_CHECKING:
    from impyard.purge.purge import PurgeReport
    from impyard.purge.selector import Selector


def purge_command(
    ctx: typer.Context,
    imp: str = typer.Argument(..., help="Imp name.", autocompletion=complete.imps),
    run: str | None = typer.Option(None, "--run", help="What this run wrote."),
    source: str | None = typer.Option(None, "--source", help="Records citing this URL."),
    path: str | None = typer.Option(None, "--path", help="Files whose path matches GLOB."),
    text: str | None = typer.Option(
        None, "--text", help="Every file holding STRING ('-': read it from stdin)."
    ),
    dry: bool = typer.Option(False, "--dry-run", help="Count and list; change nothing."),
    as_json: bool = typer.Option(False, "--json", help="One JSON document on stdout."),
) -> None:
    """Remove a leak from everywhere Impyard put a copy: main's whole history and the
    published origin, candidates and quarantines, run files, the archive, layers and
    run spaces, the queue, the journal and every backup remote.

    Rotate a leaked secret first: a purge removes copies, it cannot unpublish one. Stop
    serve first. Exit 0 when nothing is left anywhere (0 for a dry run), 1 when a file
    or a remote still holds it (the report names each)."""
    from impyard.knowledge.change import KnowledgeLimits
    from impyard.knowledge.gates.repogate import check_imp
    from impyard.policy.compile import policy_for_run
    from impyard.purge.purge import purge

    home = initialized_home(ctx)
    report = purge(home, imp, _selector(run, source, path, text), dry_run=dry)
    problems: list[str] = []
    if not dry:
        policy, _ = policy_for_run(home, imp, strict=False)
        problems = check_imp(home, imp, KnowledgeLimits.of(policy.knowledge)).lines()
    if as_json:
        print_json(report.as_dict() | {"check": problems})
    else:
        _print(report, problems)
    if not dry and (not report.complete or problems):
        raise typer.Exit(1)


def _selector(run: str | None, source: str | None, path: str | None, text: str | None) -> Selector:
    from impyard.purge.selector import Selector

    given = {
        k: v
        for k, v in (("run", run), ("source", source), ("path", path), ("text", text))
        if v is not None
    }
    if len(given) != 1:
        raise UsageError("name exactly one of --run RUN, --source URL, --path GLOB, --text STRING")
    ((kind, value),) = given.items()
    if kind == "text" and value == "-":
        value = sys.stdin.read().rstrip("\n")
    return Selector(kind, value)  # type: ignore[arg-type]


def _print(report: PurgeReport, problems: list[str]) -> None:
    c = report.counts()
    verb = "would remove" if report.dry_run else "removed"
    echo(
        f"{'dry run: ' if report.dry_run else ''}{report.imp}: {report.selector.shown}: "
        f"{verb} {c['files']} file version(s) at {c['paths']} path(s) from {c['commits']} "
        f"commit(s); {c['messages']} message(s) redacted"
    )
    for path in report.paths:
        echo(visible(f"  purge   {path}"))
    for path in report.not_cleared:
        echo(visible(f"  kept    {path}: it also cites other sources (not cleared)"))
    for ref in report.refs:
        echo(f"  rewrite {ref}")
    for ref in report.deleted_refs:
        echo(f"  delete  {ref}")
    for run_id in report.kept_checkouts:
        echo(f"  drop    the kept checkout of {run_id}")
    if c["layers"]:
        echo(f"  drop    {c['layers']} checkout layer(s)")
    for found in report.files:
        echo(visible(f"  {found.action:<8}{found.path}: {found.why}"))
    for remote in report.remotes:
        state = remote.error or (
            f"{remote.updated} ref(s) pushed, {remote.deleted} deleted"
            + ("; pruned" if remote.pruned else f"; {remote.note}" if remote.note else "")
        )
        echo(visible(f"  remote  {remote.remote}: {state}"))
    if not report.dry_run:
        echo(
            f"pruned {report.pruned} object file(s); the repository check: "
            + ("clean" if not problems else f"{len(problems)} problem(s)")
        )
        for line in problems:
            warn(line)
