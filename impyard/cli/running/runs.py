"""``impyard runs list|show|logs|receipts``: every run is inspectable."""

from __future__ import annotations

from typing import Any

import typer

from impyard.cli.shared import complete
from impyard.cli.shared._common import echo, echo_item, initialized_home, print_json
from impyard.common.errors import NotFoundError
from impyard.runs.records.model import Manifest

#: Runs ``runs list`` shows without -n or --all.
DEFAULT_LISTED = 20

# The documented `runs show --json` keys come first; the rest is operational detail.
PUBLIC_KEYS = (
    "run_id",
    "imp",
    "task_id",
    "channel",
    "mode",
    "base_commit",
    "namespace",
    "state",
    "exit_code",
    "checkpoint",
    "produced_commit",
    "validation_errors",
    "started_at",
    "ended_at",
)


def public_record(manifest: Manifest) -> dict[str, Any]:
    data = manifest.to_dict()
    return {key: data[key] for key in PUBLIC_KEYS} | {
        key: value for key, value in data.items() if key not in PUBLIC_KEYS
    }


def _rework_cell(rework: dict[str, Any]) -> str:
    """A rework of the run: its run (and checkpoint) once it ran, else its queued task."""
    if rework["run"]:
        return f"{rework['run']} ({rework['checkpoint'] or rework['state']})"
    return f"{rework['task']} ({rework['state']})"


def register(app: typer.Typer) -> None:
    runs_app = typer.Typer(help="Inspect runs.", no_args_is_help=True)
    app.add_typer(runs_app, name="runs")

    @runs_app.command("list")
    def list_command(
        ctx: typer.Context,
        imp: str | None = typer.Option(
            None, "--imp", help="Only this imp's runs.", autocompletion=complete.imps
        ),
        count: int = typer.Option(
            DEFAULT_LISTED, "-n", "--lines", min=1, help="Show the N newest runs."
        ),
        everything: bool = typer.Option(False, "--all", help="Show every run (overrides -n)."),
        as_json: bool = typer.Option(False, "--json", help="One JSON document."),
    ) -> None:
        """List runs, newest first (the 20 newest unless -n or --all)."""
        from impyard.cli.shared._table import Column, print_table
        from impyard.runs.records import lookup

        home = initialized_home(ctx)
        found = lookup.recent(home, None if everything else count, imp)
        runs = found.manifests
        if imp is not None and not runs and not home.repo(imp).is_dir():
            # A removed imp's runs still list; a name that never ran is a typo to say.
            from impyard.imp_lookup import unknown_imp

            raise unknown_imp(home, imp, also="and no runs of it")
        if as_json:
            print_json([public_record(m) for m in runs])
        else:
            columns = [
                Column("run"),
                Column("imp"),
                Column("mode", optional=True),
                Column("state", states=True),
                Column("checkpoint", states=True),
                Column("exit", justify="right"),
                # At 80 columns the mode goes and the commit stays: it says what landed.
                Column("commit", optional=True, keep=1),
            ]
            rows = [
                [
                    m.run_id,
                    m.imp,
                    m.mode,
                    m.state,
                    m.checkpoint,
                    "" if m.exit_code is None else str(m.exit_code),
                    (m.produced_commit or "")[:12],
                ]
                for m in runs
            ]
            print_table(columns, rows)
        if found.more:
            # On stderr: stdout stays the table (or the one JSON document) a script reads.
            older = f"{found.older} older runs" if found.older else f"older runs of {imp}"
            echo(f"… {older} not shown (use -n or --all)", err=True)

    @runs_app.command("show")
    def show_command(
        ctx: typer.Context,
        run_id: str = typer.Argument(..., help=complete.RUN_HELP, autocompletion=complete.runs),
        as_json: bool = typer.Option(False, "--json", help="One JSON document."),
    ) -> None:
        """Show one run: knowledge mode, base, namespace, checkpoint, commit, errors."""
        from impyard.cli.shared._table import print_fields
        from impyard.queue.tasks import reworked_by
        from impyard.runs.records import manifest
        from impyard.runs.records.lookup import resolve_run

        home = initialized_home(ctx)
        m = manifest.read(home, resolve_run(home, run_id))
        reworks = reworked_by(home, m.run_id)
        if as_json:
            print_json(public_record(m) | {"reworked_by": reworks})
            return
        rows: list[tuple[str, object]] = [
            ("run", m.run_id),
            ("imp", m.imp),
            ("task", m.task_id or "-"),
            ("channel", m.channel or "-"),
            ("knowledge mode", m.mode),
            ("base commit", m.base_commit),
            ("record namespace", m.namespace),
            ("state", m.state),
            ("checkpoint", m.checkpoint),
            ("produced commit", m.produced_commit or "-"),
            ("exit code", "-" if m.exit_code is None else m.exit_code),
            ("oom killed", m.oom_killed),
            ("timed out", m.timed_out),
            ("agent steps", "-" if m.agent_steps is None else m.agent_steps),
            ("reason", m.reason or "-"),
            ("tainted", f"yes: {m.taint}" if m.tainted else "no"),
            ("filed tasks", ", ".join(m.filed_tasks) or "-"),
            ("candidate ref", m.candidate_ref or "-"),
            ("rework of", m.rework_of or "-"),
            ("reworked by", ", ".join(_rework_cell(r) for r in reworks) or "-"),
            ("quarantine ref", m.quarantine_ref or "-"),
            ("container", m.container_id or "-"),
            ("image", m.image or "-"),
            ("runtime", m.runtime or "runc"),
            ("node", m.node or "this host"),
            ("started", m.started_at or "-"),
            ("ended", m.ended_at or "-"),
            ("timings (ms)", ", ".join(f"{k}={v}" for k, v in m.timings_ms.items()) or "-"),
        ]
        print_fields([(label, str(value)) for label, value in rows])
        if m.checkpoints:
            echo("mid-run checkpoints:")
            for c in m.checkpoints:
                when = c.landed_at or c.requested_at
                files = ", ".join(c.files[:5]) + (" …" if c.file_count > 5 else "")
                echo_item(
                    f"  {c.number}  {c.state}  {when}  {c.commit or '-'}  "
                    f"{c.file_count} file(s): {files or '-'}"
                )
        if m.validation_errors:
            echo("validation errors:")
            for error in m.validation_errors:
                echo_item(f"  {error.path or '-'}: {error.rule}: {error.message}")
        if m.repairs:
            from impyard.cli.learned.repair import repair_line

            echo("repairs:")
            for repair in m.repairs:
                echo_item(f"  {repair_line(repair.model_dump(mode='json'))}")

    @runs_app.command("receipts")
    def receipts_command(
        ctx: typer.Context,
        run_id: str = typer.Argument(..., help=complete.RUN_HELP, autocompletion=complete.runs),
        as_json: bool = typer.Option(False, "--json", help="One JSON list."),
    ) -> None:
        """List the fetch receipts of every response the run's gateway relayed, in order."""
        from impyard.cli.shared._table import Column, print_table
        from impyard.gateway.provenance.receipts import read_receipts
        from impyard.runs.records import manifest
        from impyard.runs.records.lookup import resolve_run

        home = initialized_home(ctx)
        run_id = resolve_run(home, run_id)
        manifest.read(home, run_id)
        receipts = list(read_receipts(home.run_receipts(run_id)).values())
        if as_json:
            print_json([receipt.model_dump(mode="json") for receipt in receipts])
            return
        columns = [
            Column("receipt"),
            Column("method"),
            Column("status"),
            Column("bytes", justify="right"),
            Column("sha256", optional=True),
            Column("archived", optional=True),
            Column("url", wrap=True, min_width=20),
        ]
        rows = [
            [
                r.id,
                r.method,
                str(r.status),
                f"{r.bytes}" if r.complete else f"{r.bytes} (cut)",
                r.sha256[:16],
                {None: "-", True: "yes", False: "no"}[r.archived],
                r.url,
            ]
            for r in receipts
        ]
        print_table(columns, rows)

    @runs_app.command("logs")
    def logs_command(
        ctx: typer.Context,
        run_id: str = typer.Argument(..., help=complete.RUN_HELP, autocompletion=complete.runs),
        follow: bool = typer.Option(
            False, "--follow", "-f", help="Follow the output until the run ends."
        ),
        exit_code: bool = typer.Option(
            False, "--exit-code", help="With -f: exit with the run's own exit code."
        ),
        raw: bool = typer.Option(
            False, "--raw", help="The box's bytes exactly (no escaping of control characters)."
        ),
    ) -> None:
        """Print the box's stdout and stderr; with -f, as it happens, then the outcome."""
        from impyard.cli.running.outcome import BoxOutput, outcome_lines
        from impyard.runs.host import follow as following
        from impyard.runs.records import manifest
        from impyard.runs.records.lookup import resolve_run
        from impyard.runs.records.model import RunOutcome

        home = initialized_home(ctx)
        run_id = resolve_run(home, run_id)
        manifest.read(home, run_id)
        output = BoxOutput(raw)
        if not follow:
            path = home.box_log(run_id)
            if not path.is_file():
                raise NotFoundError(f"run {run_id} has no box log yet")
            with path.open("rb") as handle:
                while chunk := handle.read(1 << 20):
                    output.write(chunk)
            output.close()
            return
        for chunk in following.box_output(home, run_id, stopped=lambda: output.broken):
            output.write(chunk)
        output.close()
        if output.broken:
            raise typer.Exit(141)  # as a shell reports a reader that went away (SIGPIPE)
        ended = following.wait_finished(home, run_id)
        assert ended is not None, "never stopped early"
        for line in outcome_lines(ended):
            echo(line)
        raise typer.Exit(RunOutcome(ended).exit_code if exit_code else 0)
