"""``impyard task add|list|cancel``: the queue that ``impyard serve`` drains."""

from __future__ import annotations

from pathlib import Path

import typer

from impyard.cli import complete
from impyard.cli._common import echo, initialized_home, print_json


def register(app: typer.Typer) -> None:
    task_app = typer.Typer(help="Queue tasks for `impyard serve`.", no_args_is_help=True)
    app.add_typer(task_app, name="task")

    @task_app.command("add")
    def add_command(
        ctx: typer.Context,
        imp: str = typer.Argument(
            ..., help="The imp to run the task.", autocompletion=complete.imps
        ),
        prompt: str | None = typer.Option(None, "--prompt", help="The task prompt."),
        prompt_file: Path | None = typer.Option(
            None, "--prompt-file", help="Read the prompt from a file ('-' for stdin)."
        ),
        reorganize: bool = typer.Option(False, "--reorganize", help="A reorganization task."),
        channel: str | None = typer.Option(None, "--channel", help="The task's channel."),
        as_json: bool = typer.Option(False, "--json", help="Print the task as JSON."),
    ) -> None:
        """Queue a task; prints its id."""
        from impyard.cli.run import read_prompt
        from impyard.imp_lookup import require_imp_name
        from impyard.queue import tasks
        from impyard.queue.db import connect

        home = initialized_home(ctx)
        require_imp_name(home, imp)
        text = read_prompt(prompt, prompt_file)
        conn = connect(home.db)
        try:
            task = tasks.add(conn, imp, text, reorganize=reorganize, channel=channel)
        finally:
            conn.close()
        if as_json:
            print_json(task.as_dict())
        else:
            echo(task.id)

    @task_app.command("list")
    def list_command(
        ctx: typer.Context,
        state_filter: str | None = typer.Option(
            None, "--state", help="queued, running, done or cancelled."
        ),
        as_json: bool = typer.Option(False, "--json", help="One JSON document."),
    ) -> None:
        """List tasks, oldest first."""
        from impyard.cli._table import Column, print_table
        from impyard.queue import tasks
        from impyard.queue.db import connect

        conn = connect(initialized_home(ctx).db)
        try:
            found = tasks.list_tasks(conn, state_filter)
        finally:
            conn.close()
        if as_json:
            print_json([t.as_dict() for t in found])
            return
        columns = [
            Column("task"),
            Column("imp"),
            Column("state", states=True),
            Column("mode", optional=True),
            Column("checkpoint", states=True, wrap=True),
            Column("run", optional=True),
            Column("rework of", optional=True),
            Column("prompt", wrap=True, optional=True),
        ]
        rows = [
            [
                t.id,
                t.imp,
                t.state,
                "reorganize" if t.reorganize else "append",
                t.checkpoint or t.error or "",
                t.run_id or "",
                t.rework_of or "",
                t.prompt.splitlines()[0][:40] if t.prompt else "",
            ]
            for t in found
        ]
        print_table(columns, rows)

    @task_app.command("cancel")
    def cancel_command(
        ctx: typer.Context, task_id: str = typer.Argument(..., help="A queued task's id.")
    ) -> None:
        """Cancel a queued task."""
        from impyard.queue import tasks
        from impyard.queue.db import connect

        conn = connect(initialized_home(ctx).db)
        try:
            tasks.cancel(conn, task_id)
        finally:
            conn.close()
        echo(f"cancelled {task_id}")
