"""``impyard task add|list|show|cancel|retry``: the queue that ``impyard serve`` drains."""

from __future__ import annotations

from pathlib import Path

import typer

from impyard.cli.shared import complete
from impyard.cli.shared._common import echo, initialized_home, print_json

#: Characters of a failed task's reason a table row shows (``task show`` gives it whole).
REASON_LIMIT = 300
#: Columns of a prompt's first line a table row shows, cut between words (``task show``
#: gives it whole).
PROMPT_PREVIEW = 40


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
        from impyard.cli.running.run import read_prompt
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
            None, "--state", help="queued, running, done, failed or cancelled."
        ),
        as_json: bool = typer.Option(False, "--json", help="One JSON document."),
    ) -> None:
        """List tasks, oldest first."""
        from impyard.cli.shared._table import Column, print_table
        from impyard.cli.shared._wrap import preview
        from impyard.common.textsafe import one_line
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
            Column("checkpoint", states=True),
            Column("reason", wrap=True),
            # Too narrow, the rework and the mode go first, then the run, the prompt last.
            Column("run", optional=True, keep=1),
            Column("rework of", optional=True),
            Column("prompt", wrap=True, optional=True, keep=2),
        ]
        rows = [
            [
                t.id,
                t.imp,
                t.state,
                "reorganize" if t.reorganize else "append",
                t.checkpoint or "",
                one_line(t.error, REASON_LIMIT) if t.error else "",
                t.run_id or "",
                t.rework_of or "",
                preview(t.prompt, PROMPT_PREVIEW),
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

    @task_app.command("show")
    def show_command(
        ctx: typer.Context,
        task_id: str = typer.Argument(..., help="A task's id."),
        as_json: bool = typer.Option(False, "--json", help="One JSON document."),
    ) -> None:
        """Show one task: its state, its run, and why it failed."""
        from impyard.cli.shared._table import print_fields
        from impyard.queue import tasks
        from impyard.queue.db import opened

        with opened(initialized_home(ctx).db) as conn:
            task = tasks.get(conn, task_id)
        if as_json:
            print_json(task.as_dict())
            return
        rows = [
            ("task", task.id),
            ("imp", task.imp),
            ("state", task.state),
            ("mode", "reorganize" if task.reorganize else "append"),
            ("channel", task.channel or "-"),
            ("created", task.created_at),
            ("started", task.started_at or "-"),
            ("finished", task.finished_at or "-"),
            ("run", task.run_id or "-"),
            ("checkpoint", task.checkpoint or "-"),
            ("reason", task.error or "-"),
            ("rework of", task.rework_of or "-"),
            ("filed by", f"{task.filed_by} (impyard-task)" if task.filed_by else "-"),
        ]
        # A reason can quote what a box chose (a path): shown, never obeyed.
        print_fields(rows)
        echo("prompt:")
        for line in task.prompt.splitlines():
            echo(f"  {line}")

    @task_app.command("retry")
    def retry_command(
        ctx: typer.Context,
        task_id: str = typer.Argument(..., help="A failed task's id."),
        as_json: bool = typer.Option(False, "--json", help="Print the task as JSON."),
    ) -> None:
        """Queue a failed task again (after fixing its cause: a secret, a policy)."""
        from impyard.common.textsafe import one_line
        from impyard.journal.log import Journal
        from impyard.queue import tasks
        from impyard.queue.db import opened

        home = initialized_home(ctx)
        with opened(home.db) as conn:
            failed = tasks.retry(conn, task_id)
            task = tasks.get(conn, task_id)
        Journal(home.journal).record(
            "task.retried", task=task.id, imp=task.imp, run=failed.run_id, error=failed.error
        )
        if as_json:
            print_json(task.as_dict())
        else:
            echo(f"queued {task.id} again (it failed: {one_line(failed.error or '-', 200)})")
