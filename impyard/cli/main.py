"""The ``impyard`` entry point: global options, sub-command groups and the one error handler."""

from __future__ import annotations

import copy
import os
import sys
from pathlib import Path

import typer
from typer.exceptions import TyperException

from impyard import __version__
from impyard.cli import conventions
from impyard.cli.learned import knowledge, memory, repair
from impyard.cli.running import journal, run, runs, task
from impyard.cli.serving import cluster, serve, service, web
from impyard.cli.setup import agents, check, imp, init, policy
from impyard.cli.shared import _common
from impyard.cli.upkeep import archive, backup, gc, status
from impyard.cli.usage import usage_error_lines
from impyard.common.errors import ImpyardError
from impyard.home import Home, resolve_home

UNEXPECTED_EXIT = 70

app = typer.Typer(
    name="impyard",
    help="Run AI agents (imps) in Docker boxes and keep what they learn in Git.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=True,
    # Plain help: click's formatter rewraps each paragraph to the terminal (at most 80
    # columns) and draws no boxes, so help reads the same piped, in a log or at 80 columns.
    rich_markup_mode=None,
    context_settings=conventions.CONTEXT_SETTINGS,
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
        # Not envvar=: the data root's resolution reads IMPYARD_HOME itself, so that
        # `impyard status` can say which of flag, environment or default chose it.
        help=(
            "Data root. Default: IMPYARD_HOME, else the nearest .impyard in the current "
            "directory or a parent, else $XDG_DATA_HOME/impyard (~/.local/share/impyard)."
        ),
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
    agents,
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
    web,
    cluster,
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


def _invoked(argv: list[str]) -> str | None:
    """The top-level command ``argv`` names: its first word after the global ``--home``.
    None when a global option comes first (``--help``, ``--version``, completion)."""
    words = iter(argv)
    for word in words:
        if word == "--home":
            next(words, None)
        elif not word.startswith("--home="):
            return None if word.startswith("-") else word
    return None


def app_for(argv: list[str]) -> typer.Typer:
    """``app`` holding only the command ``argv`` invokes: before it parses anything, typer
    builds a click command for every function in the tree it is given, inspecting each
    signature (10-15 ms for the ~110 commands here). The whole tree serves the top-level
    help, shell completion and a word that names no command (its usage error)."""
    name = _invoked(argv)
    if name is None or f"_{app.info.name}_COMPLETE".upper() in os.environ:
        return app
    commands = [info for info in app.registered_commands if info.name == name]
    groups = [info for info in app.registered_groups if info.name == name]
    if not commands and not groups:
        return app
    only = copy.copy(app)
    only.registered_commands, only.registered_groups = commands, groups
    return only


def main(argv: list[str] | None = None) -> None:
    """Run the CLI. Every error, a usage error (exit 2) included, is one line on stderr."""
    args = sys.argv[1:] if argv is None else argv
    try:
        command = conventions.click_command(app_for(args))
        # Not standalone: click's own usage-error box never prints; the handler below does.
        code = command.main(args=args, prog_name=app.info.name, standalone_mode=False)
    except ImpyardError as exc:
        _common.error(exc.message)  # a message can quote what a box chose: escaped
        sys.exit(exc.exit_code)
    except TyperException as exc:  # click's usage errors (a bad option, value or word)
        for line in usage_error_lines(exc):
            _common.echo_lines(line, err=True)
        sys.exit(exc.exit_code)
    except typer.Abort:
        typer.echo("impyard: aborted", err=True)
        sys.exit(1)
    except KeyboardInterrupt:
        typer.echo("impyard: interrupted", err=True)
        sys.exit(130)
    except Exception as exc:
        where = _log_unexpected(exc)
        detail = f"; details in {where}" if where else ""
        _common.echo_lines(
            f"impyard: unexpected error: {type(exc).__name__}: {exc}{detail}", err=True
        )
        sys.exit(UNEXPECTED_EXIT)
    # Without standalone mode click returns typer.Exit's code instead of exiting with it.
    if isinstance(code, int) and code:
        sys.exit(code)
