"""``impyard run``: one foreground run."""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

import typer

from impyard.cli.shared import complete
from impyard.cli.shared._common import echo, initialized_home, print_json, state, warn
from impyard.common.errors import ImpyardError, UsageError
from impyard.home import Home

if TYPE_CHECKING:
    from impyard.cli.running.outcome import OutputStreamer
    from impyard.runs.drive.context import RunContext
    from impyard.runs.records.model import Manifest, RunRequest


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


def _settings_context(ctx: typer.Context, home: Home) -> RunContext:
    from impyard.journal.log import Journal
    from impyard.runs.drive.context import RunContext

    return RunContext(settings=state(ctx).settings, journal=Journal(home.journal))


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
            None,
            "--timeout",
            min=0.1,
            metavar="SECONDS",
            help="Kill the box after this many seconds.",
        ),
        detach: bool = typer.Option(
            False, "--detach", "-d", help="Start the run, print its id and return at once."
        ),
        raw: bool = typer.Option(
            False, "--raw", help="Show the box's output byte for byte (no escaping)."
        ),
        as_json: bool = typer.Option(
            False, "--json", help="Print the run record as JSON (no live output)."
        ),
    ) -> None:
        """Run one task in a box now, showing its output as it happens; exit 0
        integrated/empty, 3 rejected, 4 quarantined, 5 conflict."""
        from impyard.cli.running.outcome import BoxOutput, OutputStreamer, started_line
        from impyard.runs.records.model import RunRequest

        home = initialized_home(ctx)
        request = RunRequest(
            imp=imp,
            prompt=read_prompt(prompt, prompt_file),
            reorganize=reorganize,
            channel=channel,
            command=command,
            timeout_seconds=timeout,
        )
        if detach:
            _detach(home, request, as_json)
            return
        _interrupt_on_sigterm()
        run_ctx = _settings_context(ctx, home)
        streamer: list[OutputStreamer] = []

        def admitted(m: Manifest) -> None:
            echo(started_line(m), err=True)
            if not as_json:
                streamer.append(OutputStreamer(home, m.run_id, BoxOutput(raw)))

        run_ctx.on_admitted = admitted
        from impyard.runs.host.admission import execute

        try:
            outcome = execute(run_ctx, request)
        finally:
            for each in streamer:
                each.finish()
        _report(outcome.manifest, as_json)
        from impyard import backup

        if not backup.drain():
            warn("the backup push of this run is still pending: see `impyard backup status`")
        raise typer.Exit(outcome.exit_code)

    @app.command("_drive", hidden=True)
    def drive_command(ctx: typer.Context) -> None:
        """Drive one run handed over on stdin to its end (what `run --detach` starts)."""
        from impyard.runs.host.admission import execute
        from impyard.runs.host.detach import ProgressPipe, read_request

        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        _interrupt_on_sigterm()
        pipe = ProgressPipe()
        try:
            home = initialized_home(ctx)
            request = read_request(sys.stdin.buffer)
            run_ctx = _settings_context(ctx, home)
            run_ctx.on_admitted = lambda m: pipe.send(admitted=m.run_id)

            def box_started(m: Manifest) -> None:
                pipe.send(started=m.run_id)
                pipe.close()

            run_ctx.on_box_started = box_started
            outcome = execute(run_ctx, request)
        except ImpyardError as exc:
            pipe.send(error=str(exc), exit_code=exc.exit_code)
            raise
        pipe.send(ended=outcome.manifest.to_dict())
        pipe.close()
        from impyard import backup

        backup.drain()
        raise typer.Exit(outcome.exit_code)


def _detach(home: Home, request: RunRequest, as_json: bool) -> None:
    from impyard.runs.host.detach import spawn
    from impyard.runs.records.model import RunOutcome

    # A refusal (DetachError) goes to the one error handler, with the driver's exit code.
    detached = spawn(home, request)
    if detached.ended is not None:
        _report(detached.ended, as_json)
        raise typer.Exit(RunOutcome(detached.ended).exit_code)
    if as_json:
        print_json({"run_id": detached.run_id, "state": "running"})
    else:
        echo(f"follow with `impyard runs logs -f {detached.run_id}`", err=True)
        echo(detached.run_id)


def _report(m: Manifest, as_json: bool) -> None:
    from impyard.cli.running.outcome import outcome_lines

    for message in m.warnings:
        warn(message)
    if as_json:
        from impyard.cli.running.runs import public_record

        print_json(public_record(m))
        return
    for line in outcome_lines(m):
        echo(line)
