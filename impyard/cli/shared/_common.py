"""What every command shares: the settings/home of this invocation and output helpers."""

from __future__ import annotations

import json
import sys
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from impyard.common.errors import UsageError
from impyard.common.textsafe import visible
from impyard.home import Home, ResolvedHome, resolve_home_source

if TYPE_CHECKING:
    from impyard.settings import Settings


class AppState:
    """This invocation's data root and settings. The settings (pydantic-settings, ~45 ms to
    import) load only when a command asks for them: most commands need only the home."""

    def __init__(self, home_option: Path | None) -> None:
        self.home_option = home_option

    @cached_property
    def resolved(self) -> ResolvedHome:
        """The data root and why it is this one (flag, environment, found, per-user)."""
        return resolve_home_source(self.home_option)

    @cached_property
    def home(self) -> Home:
        return Home(self.resolved.root)

    @cached_property
    def settings(self) -> Settings:
        from impyard.settings import load_settings

        return load_settings(self.home.root)


def state(ctx: typer.Context) -> AppState:
    obj = ctx.find_root().obj
    if not isinstance(obj, AppState):  # pragma: no cover - the root callback always sets it
        raise RuntimeError("CLI state missing")
    return obj


def initialized_home(ctx: typer.Context) -> Home:
    app_state = state(ctx)
    home = app_state.home
    if not home.is_initialized():
        why = app_state.resolved.describe()
        raise UsageError(f"no Impyard data root at {home.root} ({why}): run `impyard init` first")
    return home


def print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, indent=2, sort_keys=True, default=str) + "\n")


def echo(line: str = "", *, err: bool = False) -> None:
    """Print one line (on stderr with ``err``). Every line the CLI prints goes through
    ``visible``, here or in the table helper: a value a box chose (a path, a reason, a URL)
    can hold an escape sequence, a newline that forges a line, or a bidirectional override
    that reorders the owner's terminal, and each is shown as its escape instead."""
    typer.echo(visible(line), err=err)


def echo_item(line: str) -> None:
    """Print one line of a listing (a violation, a checkpoint): as ``echo``, and on a
    terminal folded between words to its width, the rest indented under the item."""
    if not sys.stdout.isatty():
        echo(line)
        return
    from impyard.cli.shared._wrap import terminal_width, wrap_words

    indent = len(line) - len(line.lstrip(" ")) + 2
    for part in wrap_words(visible(line), terminal_width(), indent=indent):
        typer.echo(part)


def echo_lines(text: str, *, err: bool = False) -> None:
    """Print Impyard's own text of several lines (a diff, an error listing each violation),
    each line escaped as ``echo`` escapes one."""
    for line in text.split("\n"):
        typer.echo(visible(line), err=err)


def warn(message: str) -> None:
    """One line on stderr: a warning can quote what a box chose (a run's warnings)."""
    echo(f"impyard: warning: {message}", err=True)


def error(message: str) -> None:
    """An error's lines on stderr (a policy error lists each violation on its own)."""
    echo_lines(f"impyard: error: {message}", err=True)
