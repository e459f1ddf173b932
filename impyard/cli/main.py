"""The ``impyard`` entry point: global options, sub-command groups and the one error handler."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from impyard import __version__
from impyard.cli import (
    _common,
    archive,
    backup,
    check,
    gc,
    imp,
    init,
    journal,
    knowledge,
    memory,
    policy,
    repair,
    run,
    runs,
    serve,
    service,
    status,
    task,
)
from impyard.errors import ImpyardError
from impyard.home import Home, resolve_home

UNEXPECTED_EXIT = 70

app = typer.Typer(
    name="impyard",
    help="Run AI agents (imps) in Docker boxes and keep what they learn in Git.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=True,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"impyard {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    ctx: typer.Context,
    home: Path | None = typer.Option(
        None,
        "--home",
        envvar="IMPYARD_HOME",
        help="Data root (default ./.impyard).",
        show_default=False,
    ),
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    ctx.obj = _common.AppState(home)
    _error_log_home[0] = ctx.obj.home


for group in (
    init,
    imp,
    knowledge,
    run,
    runs,
    repair,
    task,
    serve,
    journal,
    gc,
    archive,
    memory,
    policy,
    check,
    status,
    service,
    backup,
):
    group.register(app)


#: The data root of this invocation, once the global options are parsed: the error log
#: belongs in the home the owner chose with --home, not the environment's default.
_error_log_home: list[Home | None] = [None]


def _log_unexpected(exc: BaseException) -> Path | None:
    """Write the traceback with versions where an owner can find it; return that path."""
    import platform
    import traceback

    candidates: list[Path] = []
    home = _error_log_home[0]
    if home is None:
        try:
            home = Home(resolve_home(None))
        except Exception:  # the environment itself may be what is broken
            home = None
    if home is not None:
        candidates.append(home.error_log)
    candidates.append(Path("/tmp") / "impyard-error.log")
    report = (
        f"impyard {__version__} python {platform.python_version()} {platform.platform()}\n"
        f"argv: {sys.argv}\n" + "".join(traceback.format_exception(exc))
    )
    for path in candidates:
        try:
            if path.parent.is_dir():
                with path.open("a") as handle:
                    handle.write(report + "\n")
                return path
        except OSError:
            continue
    return None


def main(argv: list[str] | None = None) -> None:
    """Run the CLI. Typer handles usage errors (exit 2); Impyard errors print one line."""
    try:
        app(args=argv)
    except ImpyardError as exc:
        typer.echo(f"impyard: error: {exc.message}", err=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        typer.echo("impyard: interrupted", err=True)
        sys.exit(130)
    except Exception as exc:
        where = _log_unexpected(exc)
        detail = f"; details in {where}" if where else ""
        typer.echo(f"impyard: unexpected error: {type(exc).__name__}: {exc}{detail}", err=True)
        sys.exit(UNEXPECTED_EXIT)
