"""CLI group placeholder; its owner fills it in."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    del app
