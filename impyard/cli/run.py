"""``impyard run``: one foreground run."""

from __future__ import annotations

import signal
from pathlib import Path
from types import FrameType

import typer

from impyard.cli import complete
from impyard.cli._common import echo, initialized_home, print_json, state, warn
from impyard.errors import UsageError


def read_prompt(prompt: str | None, prompt_file: Path | None) -> str:
    if (prompt is None) == (prompt_file is None):
        raise UsageError("give exactly one of --prompt or --prompt-file")
    if prompt_file is not None:
        try:
            text = (
                typer.get_text_stream("stdin").read()
                if str(prompt_file) == "-"
                else prompt_file.read_text()
            )
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"cannot read prompt file {prompt_file}: {exc}") from exc
    else:
        text = prompt or ""
    if not text.strip():
        raise UsageError("the task prompt is empty")
    return text


def _interrupt_on_sigterm() -> None:
    """SIGTERM is handled like Ctrl-C: the box is killed and the run quarantined."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


def register(app: typer.Typer) -> None:
    @app.command("run")
    def run_command(
        ctx: typer.Context,
        imp: str = typer.Argument(..., help="The imp to run.", autocompletion=complete.imps),
        prompt: str | None = typer.Option(None, "--prompt", help="The task prompt."),
        prompt_file: Path | None = typer.Option(
            None, "--prompt-file", help="Read the task prompt from a file ('-' for stdin)."
        ),
        reorganize: bool = typer.Option(
            False, "--reorganize", help="Take the imp's exclusive reorganization lease."
        ),
        channel: str | None = typer.Option(
            None, "--channel", help="Channel; adds its Memory block to the task."
        ),
        command: str | None = typer.Option(
            None, "--command", help="Owner override of the imp's command (/bin/sh -c CMD)."
        ),
        timeout: float | None = typer.Option(
            None, "--timeout", min=0.1, help="Kill the box after this many seconds."
        ),
        as_json: bool = typer.Option(False, "--json", help="Print the run record as JSON."),
    ) -> None:
        """Run one task in a box now; exit 0 integrated/empty, 3 rejected, 4 quarantined,
        5 conflict."""
        from impyard.journal import Journal
        from impyard.runs.admission import execute
        from impyard.runs.model import RunRequest
        from impyard.runs.pipeline import RunContext

        home = initialized_home(ctx)
        request = RunRequest(
            imp=imp,
            prompt=read_prompt(prompt, prompt_file),
            reorganize=reorganize,
            channel=channel,
            command=command,
            timeout_seconds=timeout,
        )
        _interrupt_on_sigterm()
        outcome = execute(
            RunContext(settings=state(ctx).settings, journal=Journal(home.journal)), request
        )
        m = outcome.manifest
        for message in m.warnings:
            warn(message)
        if as_json:
            from impyard.cli.runs import public_record

            print_json(public_record(m))
        else:
            line = f"{m.run_id} {m.checkpoint}"
            if m.produced_commit:
                line += f" {m.produced_commit}"
            if m.reason:
                line += f" ({m.reason})"
            echo(line)
            for error in m.validation_errors:
                echo(f"  {error.path or '-'}: {error.rule}: {error.message}")
        from impyard import backup

        if not backup.drain():
            warn("the backup push of this run is still pending: see `impyard backup status`")
        raise typer.Exit(outcome.exit_code)
