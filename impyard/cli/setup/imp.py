"""``impyard imp create|list|set|rm``."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

import typer

from impyard.cli.shared import complete
from impyard.cli.shared._common import echo, initialized_home, print_json
from impyard.common.errors import UsageError

if TYPE_CHECKING:
    from impyard.knowledge.imps import ImpSettings


def register(app: typer.Typer) -> None:
    imp_app = typer.Typer(help="Create, list, change and remove imps.", no_args_is_help=True)

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
            help="Run a real agent (its image and adapter): pi, claude-code, codex, ... "
            "(`impyard agents` lists them).",
        ),
    ) -> None:
        """Create an imp and its knowledge repository (initial branch main)."""
        from impyard.common.names import check_imp_name
        from impyard.knowledge.imps import ImpSettings, create_imp
        from impyard.lifecycle import require_image, settings_with

        home = initialized_home(ctx)
        check_imp_name(imp)  # a bad name is the first thing to say, before any image
        settings = settings_with(ImpSettings(), image=image, command=command, agent=agent)
        if home.imp_dir(imp).exists() and (agent or image or command):
            # The owner wants this imp to run something else: that is `imp set`'s job.
            options = " ".join(
                f"--{name} {shlex.quote(value)}"
                for name, value in (("agent", agent), ("image", image), ("command", command))
                if value is not None
            )
            raise UsageError(
                f"imp {imp!r} already exists: to change what it runs, "
                f"`impyard imp set {imp} {options}`"
            )
        if image:
            require_image(image)
        path = create_imp(home, imp, settings)
        echo(f"created imp {imp}: {path}")
        if agent is not None:
            _agent_hint(settings)

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
        from impyard.cli.shared._table import Column, print_table

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

    @imp_app.command("set")
    def set_command(
        ctx: typer.Context,
        imp: str = typer.Argument(..., help="The imp.", autocompletion=complete.imps),
        image: str | None = typer.Option(
            None, "--image", help="Box image for this imp ('' for the policy's box.image)."
        ),
        command: str | None = typer.Option(
            None, "--command", help="Box command (/bin/sh -c CMD; '' for the policy's)."
        ),
        agent: str | None = typer.Option(
            None, "--agent", help="Run this agent ('pi'): its command and, unless --image, image."
        ),
        as_json: bool = typer.Option(False, "--json", help="Print the settings as JSON."),
    ) -> None:
        """Change an imp's box image, command or agent; its next run uses them."""
        from impyard.lifecycle import set_imp_settings

        home = initialized_home(ctx)
        settings = set_imp_settings(home, imp, image=image, command=command, agent=agent)
        if as_json:
            print_json({"imp": imp, **settings.as_dict()})
            return
        shown = "  ".join(f"{k}={v or '-'}" for k, v in settings.as_dict().items())
        echo(f"imp {imp}: {shown}")
        if agent:
            _agent_hint(settings)

    @imp_app.command("rm")
    def rm_command(
        ctx: typer.Context,
        imp: str = typer.Argument(..., help="The imp.", autocompletion=complete.imps),
        purge: bool = typer.Option(
            False, "--purge-knowledge", help="Delete its knowledge instead of keeping it."
        ),
        as_json: bool = typer.Option(False, "--json", help="Print what was done as JSON."),
    ) -> None:
        """Remove an imp: no longer listed or runnable. Its knowledge moves to
        removed/IMP-STAMP/ in the data root unless --purge-knowledge; its memory, policy
        overlay and backups stay. Refused while any of its runs or tasks is live."""
        from impyard.lifecycle import remove_imp

        home = initialized_home(ctx)
        removal = remove_imp(home, imp, purge=purge)
        if as_json:
            print_json(removal.as_dict())
        elif removal.moved_to is None:
            echo(f"removed imp {imp}; its knowledge is deleted (backups on remotes are kept)")
        else:
            echo(f"removed imp {imp}; its knowledge is kept in {removal.moved_to}")

    app.add_typer(imp_app, name="imp")


def _agent_hint(settings: ImpSettings) -> None:
    from impyard.box.images.agents import agent_named

    chosen = agent_named(settings.agent or "")
    echo(
        f"it runs {settings.image} (build it with `{chosen.build_hint}`); set "
        "IMPYARD_MODEL in the policy's [box.env] and route 'llm' to your provider"
    )
