"""``impyard backup status|now`` and ``impyard restore``."""

from __future__ import annotations

import shutil
from dataclasses import asdict
from pathlib import Path

import typer

from impyard.cli.shared import complete
from impyard.cli.shared._common import echo, error, initialized_home, print_json, state
from impyard.common.errors import ImpyardError, UsageError

NO_REMOTES = (
    "no backup remotes configured: add them to [backup] remotes in policy/org.toml and run "
    "`impyard deploy`"
)


def register(app: typer.Typer) -> None:
    backup_app = typer.Typer(help="Push knowledge to the backup remotes.", no_args_is_help=True)
    app.add_typer(backup_app, name="backup")

    @backup_app.command("status")
    def status_command(
        ctx: typer.Context,
        as_json: bool = typer.Option(False, "--json", help="One JSON document on stdout."),
    ) -> None:
        """Per imp and remote: last push, whether it lags main, the last error. Exit 1 when
        any remote is failing."""
        from impyard.backup.report import backup_rows
        from impyard.backup.sync import configured_remotes

        home = initialized_home(ctx)
        rows = backup_rows(home)
        if as_json:
            print_json([row.as_dict() for row in rows])
        elif not configured_remotes(home):
            echo(NO_REMOTES)
        else:
            from impyard.cli.shared._table import Column, print_table

            columns = [
                Column("imp"),
                Column("remote", wrap=True),
                Column("pushed", wrap=True),
                Column("lagging"),
                Column("main", optional=True),
                Column("state", states=True, wrap=True, min_width=20),
            ]
            table = [
                [
                    row.imp,
                    row.remote,
                    row.pushed_at or "never",
                    _yes(row.lagging),
                    (row.pushed_main or "")[:12],
                    f"failing since {row.failing_since}: {row.last_error}"
                    if row.failing
                    else "current",
                ]
                for row in rows
            ]
            print_table(columns, table)
        if any(row.failing for row in rows):
            raise typer.Exit(1)

    @backup_app.command("now")
    def now_command(
        ctx: typer.Context,
        imp: str | None = typer.Argument(
            None, help="One imp (default: every imp).", autocompletion=complete.imps
        ),
        as_json: bool = typer.Option(False, "--json", help="One JSON document on stdout."),
    ) -> None:
        """Push one imp, or every imp, to every remote now and wait. Exit 1 on any failure."""
        from impyard.backup.sync import backup_imp, configured_remotes
        from impyard.knowledge.imps import list_imps, require_imp

        home = initialized_home(ctx)
        if not configured_remotes(home):
            raise UsageError(NO_REMOTES)
        if imp is not None:
            require_imp(home, imp)
        names = [imp] if imp is not None else list_imps(home)
        rows = []
        for name in names:
            for result in backup_imp(home, name):
                rows.append({"imp": name, "ok": result.ok, **asdict(result)})
        if as_json:
            print_json(rows)
        else:
            if not names:
                echo("no imps to back up")
            for row in rows:
                if row["ok"]:
                    what = f"main {str(row['main'])[:12]}, {row['updated']} ref(s) updated"
                    what += f", {row['deleted']} deleted" if row["deleted"] else ""
                    echo(f"{row['imp']}  {row['remote']}  ok ({what})")
                else:
                    tries = row["attempts"]
                    echo(
                        f"{row['imp']}  {row['remote']}  FAILED after {tries} attempt(s): "
                        f"{row['error']}"
                    )
        if not all(row["ok"] for row in rows):
            raise typer.Exit(1)

    @app.command("restore")
    def restore_command(
        ctx: typer.Context,
        source: str = typer.Option(
            ..., "--from", help="A backup remote: local path, file:// or another git URL."
        ),
        imps: list[str] | None = typer.Option(
            None, "--imp", help="Restore this imp (repeatable; required for non-local URLs)."
        ),
        accept: bool = typer.Option(
            False,
            "--accept-settings",
            help="Install the image, command and agent the backup carries.",
        ),
        keep: bool = typer.Option(
            False,
            "--keep-settings",
            help="Keep this data root's settings (the defaults for a new imp).",
        ),
        as_json: bool = typer.Option(False, "--json", help="One JSON document on stdout."),
    ) -> None:
        """Rebuild imps (knowledge, origin, settings) from a backup into this data root
        (initializing it when needed); never over commits the backup lacks, never a tree
        the lane would refuse, never settings that differ from what an imp runs anyway
        unless told which to take."""
        from impyard.backup.offers import Choice, settings_line
        from impyard.backup.restore import RestoreRefused, restore
        from impyard.dataroot import init_home
        from impyard.knowledge.imps import ImpSettings, list_imps

        if accept and keep:
            raise UsageError("--accept-settings and --keep-settings exclude each other")
        home = state(ctx).home
        fresh = not home.root.exists()
        if not home.is_initialized():
            init_home(home)
        choice: Choice = "accept" if accept else "keep" if keep else "ask"
        try:
            results = restore(home, source, imps, relative_to=Path.cwd(), settings=choice)
        except ImpyardError as exc:
            if fresh and not list_imps(home):
                shutil.rmtree(home.root, ignore_errors=True)  # leave no data root it made
            if not (as_json and isinstance(exc, RestoreRefused)):
                raise
            print_json(exc.document)
            error(exc.message)
            raise typer.Exit(exc.exit_code) from exc
        if as_json:
            print_json([asdict(result) for result in results])
            return
        for result in results:
            verb = "restored" if result.created else "brought up to the backup"
            echo(
                f"{result.imp}: {verb}, main {result.main[:12]}, {result.refs} ref(s), "
                f"settings {result.settings} ({home.repo(result.imp)})"
            )
            settings = ImpSettings(result.image, result.command, result.agent)
            echo(f"  {settings_line(settings)}")


def _yes(value: bool) -> str:
    return "yes" if value else "no"
