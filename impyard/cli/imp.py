"""``impyard imp create|list``."""

from __future__ import annotations

import typer

from impyard.cli._common import echo, initialized_home, print_json
from impyard.errors import UsageError


def register(app: typer.Typer) -> None:
    imp_app = typer.Typer(help="Create and list imps.", no_args_is_help=True)

    @imp_app.command("create")
    def create_command(
        ctx: typer.Context,
        imp: str = typer.Argument(..., help="Imp name: lowercase letters, digits and '-'."),
        image: str | None = typer.Option(None, "--image", help="Box image for this imp."),
        command: str | None = typer.Option(
            None, "--command", help="Box command for this imp (run as /bin/sh -c CMD)."
        ),
        agent: str | None = typer.Option(
            None,
            "--agent",
            help="Run a real agent: 'pi' (image impyard-pi:latest and its adapter).",
        ),
    ) -> None:
        """Create an imp and its knowledge repository (initial branch main)."""
        from impyard.knowledge.imps import ImpSettings, create_imp

        home = initialized_home(ctx)
        settings = ImpSettings(image=image, command=command)
        if agent is not None:
            from impyard.box.agents import agent_named

            chosen = agent_named(agent)
            if command is not None:
                raise UsageError("--agent sets the command; leave out --command")
            settings = ImpSettings(image=image or chosen.image, command=chosen.command, agent=agent)
        path = create_imp(home, imp, settings)
        echo(f"created imp {imp}: {path}")
        if agent is not None:
            echo(
                f"it runs {settings.image} (build it with `{chosen.build_hint}`); set "
                "IMPYARD_MODEL in the policy's [box.env] and route 'llm' to your provider"
            )

    @imp_app.command("list")
    def list_command(
        ctx: typer.Context,
        as_json: bool = typer.Option(False, "--json", help="One JSON document on stdout."),
    ) -> None:
        """List imps with their knowledge repository and settings."""
        from impyard.knowledge.imps import list_imps, read_imp_settings

        home = initialized_home(ctx)
        rows = []
        for name in list_imps(home):
            settings = read_imp_settings(home, name)
            rows.append({"imp": name, "repo": str(home.repo(name)), **settings.as_dict()})
        if as_json:
            print_json(rows)
            return
        if not rows:
            echo("no imps (create one with `impyard imp create IMP`)")
            return
        from impyard.cli._table import Column, print_table

        columns = [
            Column("imp"),
            Column("agent"),
            Column("image", wrap=True),
            Column("command", wrap=True, optional=True),
            Column("repository", wrap=True, min_width=20),
        ]
        table = [
            [str(row[k] or "-") for k in ("imp", "agent", "image", "command", "repo")]
            for row in rows
        ]
        print_table(columns, table)

    app.add_typer(imp_app, name="imp")
