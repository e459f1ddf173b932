"""``impyard candidates|quarantine list|show|diff|retry|drop|export``: the owner's repair
of what Impyard preserved off main (refused changes, quarantined runs)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from impyard.cli.shared import complete
from impyard.cli.shared._common import echo, echo_lines, initialized_home, print_json, state, warn

if TYPE_CHECKING:
    from impyard.repair.preserved import Kind


#: ``retry --dry-run``'s help.
DRY_RETRY = "Say whether it would land, what and why not; change nothing."
#: Longest reason a listing shows on its row (show has all of it).
REASON_CHARS = 80

_HELP = {
    "candidate": "Changes the lane refused or could not land (refs/candidates/<run-id>).",
    "quarantine": "What boxes left after an abnormal exit (refs/quarantine/<run-id> and the "
    "kept checkout).",
}


def register(app: typer.Typer) -> None:
    app.add_typer(_group("candidate"), name="candidates")
    app.add_typer(_group("quarantine"), name="quarantine")


def _group(kind: Kind) -> typer.Typer:
    group = typer.Typer(help=_HELP[kind], no_args_is_help=True)
    noun = "candidates" if kind == "candidate" else "quarantine"

    @group.command("list")
    def list_command(
        ctx: typer.Context,
        imp: str | None = typer.Option(
            None, "--imp", help="Only this imp's.", autocompletion=complete.imps
        ),
        as_json: bool = typer.Option(False, "--json", help="One JSON document."),
    ) -> None:
        """List them across imps, newest run first."""
        from impyard.knowledge.imps import open_repo
        from impyard.repair.preserved import list_preserved
        from impyard.repair.views import row

        home = initialized_home(ctx)
        rows = [row(p, open_repo(home, p.imp)) for p in list_preserved(home, kind, imp)]
        if as_json:
            print_json(rows)
            return
        _print_rows(kind, rows)

    @group.command("show")
    def show_command(
        ctx: typer.Context,
        run_id: str = typer.Argument(..., help=complete.RUN_HELP, autocompletion=complete.runs),
        as_json: bool = typer.Option(False, "--json", help="One JSON document."),
    ) -> None:
        """Why it is off main, and each path against the current main."""
        from impyard.knowledge.imps import open_repo
        from impyard.repair.preserved import find_preserved, preserved_run
        from impyard.repair.views import details

        home = initialized_home(ctx)
        found = find_preserved(home, kind, preserved_run(home, run_id, kind))
        shown = details(found, open_repo(home, found.imp))
        if as_json:
            print_json(shown)
            return
        _print_details(shown)

    @group.command("diff")
    def diff_command(
        ctx: typer.Context,
        run_id: str = typer.Argument(..., help=complete.RUN_HELP, autocompletion=complete.runs),
        as_json: bool = typer.Option(False, "--json", help="One JSON document."),
    ) -> None:
        """Unified diffs from the current main to the preserved files (bounded)."""
        from impyard.knowledge.imps import open_repo
        from impyard.repair.preserved import find_preserved, preserved_run
        from impyard.repair.views import diff

        home = initialized_home(ctx)
        found = find_preserved(home, kind, preserved_run(home, run_id, kind))
        shown = diff(found, open_repo(home, found.imp))
        if as_json:
            print_json(shown)
            return
        _print_diff(shown, noun)

    def retry(ctx: typer.Context, run_id: str, as_json: bool, from_ref: bool, dry: bool) -> None:
        from impyard.cli.learned.repair_print import print_retry
        from impyard.repair.preserved import preserved_run
        from impyard.repair.retry import retry as retry_change

        run_id = preserved_run(initialized_home(ctx), run_id, kind)
        result = retry_change(state(ctx).settings, kind, run_id, from_ref=from_ref, dry_run=dry)
        for message in result.warnings:
            warn(message)
        print_json(result.as_dict()) if as_json else print_retry(result.as_dict())
        raise typer.Exit(result.exit_code)

    if kind == "candidate":

        @group.command("retry")
        def retry_candidate(
            ctx: typer.Context,
            run_id: str = typer.Argument(..., help=complete.RUN_HELP, autocompletion=complete.runs),
            as_json: bool = typer.Option(False, "--json", help="One JSON document."),
            dry: bool = typer.Option(False, "--dry-run", help=DRY_RETRY),
        ) -> None:
            """Land a candidate refused under a policy since changed (e.g. a raised limit).

            Re-validates the same files against the current main and policy, then lands
            through the lane; it cannot fix content (`rework` or re-run the task). Exit 0
            landed (the ref is removed after main moved), 3 rejected, 5 conflict, 1
            nothing to land (the ref stays as it was in all three); 0 for a dry run."""
            retry(ctx, run_id, as_json, False, dry)

    else:

        @group.command("retry")
        def retry_quarantine(
            ctx: typer.Context,
            run_id: str = typer.Argument(..., help=complete.RUN_HELP, autocompletion=complete.runs),
            as_json: bool = typer.Option(False, "--json", help="One JSON document."),
            from_ref: bool = typer.Option(
                False, "--from-ref", help="Use the ref's tree, not the kept checkout."
            ),
            dry: bool = typer.Option(False, "--dry-run", help=DRY_RETRY),
        ) -> None:
            """Land a quarantined change under a policy since changed (e.g. a raised limit).

            Re-validates a fresh snapshot of the kept checkout (or the ref's tree when it is
            gone) against the current main and policy, then lands through the lane; it
            cannot fix content (`rework` or re-run the task). Exit 0 landed, 3 rejected, 5
            conflict, 1 nothing to land (everything stays as it was in all three); 0 for a
            dry run."""
            retry(ctx, run_id, as_json, from_ref, dry)

    @group.command("approve")
    def approve_command(
        ctx: typer.Context,
        run_id: str = typer.Argument(..., help=complete.RUN_HELP, autocompletion=complete.runs),
        as_json: bool = typer.Option(False, "--json", help="One JSON document."),
        dry: bool = typer.Option(
            False, "--dry-run", help="List what would land and what would go; change nothing."
        ),
    ) -> None:
        """Land a change held for its deletions (more than knowledge.max_deletions).

        The owner's decision, journaled with their name: the change goes through the lane
        and its checks as any retry, with the deletion gate lifted for it alone. Exit 0
        landed (or approved and landed before: nothing changes), 3 rejected, 5 conflict;
        0 for a dry run."""
        from impyard.cli.learned.repair_print import print_approved, print_retry
        from impyard.repair.approve import AlreadyApproved, approve
        from impyard.repair.preserved import preserved_run

        run_id = preserved_run(initialized_home(ctx), run_id, kind)
        result = approve(state(ctx).settings, kind, run_id, dry_run=dry)
        if isinstance(result, AlreadyApproved):
            print_json(result.as_dict()) if as_json else print_approved(result.as_dict())
            return
        for message in result.warnings:
            warn(message)
        print_json(result.as_dict()) if as_json else print_retry(result.as_dict())
        raise typer.Exit(result.exit_code)

    @group.command("rework")
    def rework_command(
        ctx: typer.Context,
        run_id: str = typer.Argument(..., help=complete.RUN_HELP, autocompletion=complete.runs),
        note: str | None = typer.Option(
            None, "--note", help="What the agent should know besides the violations."
        ),
        as_json: bool = typer.Option(False, "--json", help="Print the task as JSON."),
        dry: bool = typer.Option(
            False, "--dry-run", help="Show the task and its task file; queue nothing."
        ),
    ) -> None:
        """Queue a rework task: the same imp fixes the refused files and tries again.

        Its box starts with the files in its checkout (records renamed into its namespace)
        and a task that quotes the original prompt, every violation and --note; what it
        leaves is validated like any run (`impyard serve` runs it). The ref stays."""
        from impyard.repair.preserved import preserved_run
        from impyard.repair.rework import rework

        home = initialized_home(ctx)
        if dry:
            from impyard.cli.learned.repair_print import print_rework

            preview = rework(home, kind, preserved_run(home, run_id, kind), note, dry_run=True)
            if as_json:
                print_json(preview.as_dict())
            else:
                print_rework(preview.as_dict())
            return
        task = rework(home, kind, preserved_run(home, run_id, kind), note)
        if as_json:
            print_json(task.as_dict())
            return
        echo(
            f"queued {task.id}: rework of {task.rework_of} (attempt {task.rework_attempt}); "
            "`impyard serve` runs it"
        )

    @group.command("drop")
    def drop_command(
        ctx: typer.Context,
        run_id: str = typer.Argument(..., help=complete.RUN_HELP, autocompletion=complete.runs),
        as_json: bool = typer.Option(False, "--json", help="One JSON document."),
        dry: bool = typer.Option(False, "--dry-run", help="Say what it removes; remove nothing."),
    ) -> None:
        """Delete the ref (and a quarantined run's kept checkout); main is untouched."""
        from impyard.cli.learned.repair_print import print_drop
        from impyard.repair.drop import drop
        from impyard.repair.preserved import preserved_run

        home = initialized_home(ctx)
        result = drop(home, kind, preserved_run(home, run_id, kind), dry_run=dry).as_dict()
        if as_json:
            print_json(result)
        else:
            print_drop(result)

    @group.command("export")
    def export_command(
        ctx: typer.Context,
        run_id: str = typer.Argument(..., help=complete.RUN_HELP, autocompletion=complete.runs),
        directory: Path = typer.Argument(..., help="A new or empty directory."),
        as_json: bool = typer.Option(False, "--json", help="One JSON document."),
    ) -> None:
        """Write the change as plain files for repair by hand.

        DIR/files/<path> from the stored blobs, and DIR/export.json (deletions, each path's
        status against main, the violations)."""
        from impyard.repair.export import export
        from impyard.repair.preserved import preserved_run

        home = initialized_home(ctx)
        result = export(home, kind, preserved_run(home, run_id, kind), directory)
        if as_json:
            print_json(result.as_dict())
            return
        doc = result.document
        echo(
            f"exported {len(doc['written'])} file(s) and {len(doc['deleted'])} deletion(s) of "
            f"{doc['ref']} to {result.directory} (list in export.json)"
        )

    return group


def _print_rows(kind: Kind, rows: list[dict[str, Any]]) -> None:
    from impyard.cli.shared._table import Column, print_table
    from impyard.common.textsafe import visible

    columns = [
        Column("run"),
        Column("imp"),
        Column("created", optional=True),
        Column("checkpoint", states=True),
        Column("files", optional=True),
    ]
    if kind == "quarantine":
        columns.append(Column("checkout", optional=True))
    columns.append(Column("reason", wrap=True, min_width=20))
    table: list[list[str]] = []
    for r in rows:
        reason = visible(r["reason"].splitlines()[0] if r["reason"] else "")
        if len(reason) > REASON_CHARS:
            reason = reason[: REASON_CHARS - 1] + "…"
        cells = [
            r["run_id"],
            r["imp"],
            r["created_at"],
            "held" if r["held"] else r["checkpoint"] or "-",
            f"+{r['written']} -{r['deleted']}",
        ]
        if kind == "quarantine":
            cells.append("kept" if r["checkout_kept"] else "gone")
        table.append([*cells, reason])
    print_table(columns, table)


def _print_details(shown: dict[str, Any]) -> None:
    from impyard.cli.shared._table import print_fields
    from impyard.common.textsafe import visible

    rows: list[tuple[str, str]] = [
        ("run", shown["run_id"]),
        ("imp", shown["imp"]),
        ("ref", f"{shown['ref']} ({shown['commit']})"),
        ("base", shown["base"]),
        ("main", shown["main"]),
        ("created", shown["created_at"]),
        ("checkpoint", shown["checkpoint"] or "-"),
        ("mode", shown["mode"] or "-"),
        ("reason", shown["reason"] or "-"),
    ]
    if "checkout_kept" in shown:
        rows.append(("checkout", "kept" if shown["checkout_kept"] else "gone"))
    print_fields(rows)
    if shown["violations"]:
        echo(f"violations ({shown['violations_total']}):")
        for v in shown["violations"]:
            echo(visible(f"  {v['path'] or '-'}: {v['rule']}: {v['message']}"))
    elif shown["message"]:
        echo("preserved with:")
        for line in shown["message"]:
            echo(visible(f"  {line}"))
    if shown["not_kept"]:
        echo(f"not kept ({len(shown['not_kept'])}):")
        for line in shown["not_kept"]:
            echo(visible(f"  {line.removeprefix('- ')}"))
    counts = ", ".join(f"{n} {status}" for status, n in shown["status_counts"].items())
    echo(f"files against main ({shown['files_total']}): {counts or 'none'}")
    for f in shown["files"]:
        size = "" if f["size"] is None else f"  ({f['size']} bytes)"
        echo(visible(f"  {f['status']:<9} {f['path']}{size}"))
    if shown["files_total"] > len(shown["files"]):
        echo(f"  ... {shown['files_total'] - len(shown['files'])} more (see --json or diff)")
    if shown["repairs"]:
        echo("repairs:")
        for r in shown["repairs"]:
            echo(visible(f"  {repair_line(r)}"))


def _print_diff(shown: dict[str, Any], noun: str) -> None:
    from impyard.common.textsafe import visible

    for f in shown["files"]:
        echo(visible(f"== {f['status']} {f['path']}"))
        echo_lines(f["diff"])
    left = shown["files_total"] - len(shown["files"])
    if shown["truncated"] and left:
        echo(f"... {left} more file(s) not shown: `impyard {noun} export` writes them all")
    if not shown["files_total"]:
        echo("no difference from main")


def repair_line(r: dict[str, Any]) -> str:
    """One repair record as ``runs show`` and ``show`` print it."""
    line = f"{r['at']}  {r['action']} {r['kind']} by {r['by']}: {r['outcome']}"
    if r.get("checkpoint") is not None:
        line += f" (checkpoint {r['checkpoint']})"
    if r.get("commit"):
        line += f" {r['commit']}"
    if r.get("violations"):
        line += f", {r['violations']} violation(s)"
    if r.get("detail"):
        word = {"retry": "from the", "rework": "as"}.get(r["action"], "to")
        line += f" ({word} {r['detail']})"
    return line
