"""What every command shares: the settings/home of this invocation and output helpers."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import Any

import typer

from impyard.errors import UsageError
from impyard.home import Home
from impyard.settings import Settings


@dataclass(frozen=True)
class AppState:
    settings: Settings

    @property
    def home(self) -> Home:
        return Home(self.settings.home)


def state(ctx: typer.Context) -> AppState:
    obj = ctx.find_root().obj
    if not isinstance(obj, AppState):  # pragma: no cover - the root callback always sets it
        raise RuntimeError("CLI state missing")
    return obj


def initialized_home(ctx: typer.Context) -> Home:
    home = state(ctx).home
    if not home.is_initialized():
        raise UsageError(f"no Impyard data root at {home.root}: run `impyard init` first")
    return home


def print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, indent=2, sort_keys=True, default=str) + "\n")


def echo(message: str = "") -> None:
    typer.echo(message)


def warn(message: str) -> None:
    typer.echo(f"impyard: warning: {message}", err=True)
