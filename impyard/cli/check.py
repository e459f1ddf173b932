"""``impyard check box``: the tmpfs container primitive, verified."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    del app
