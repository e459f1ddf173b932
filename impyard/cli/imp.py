"""``impyard imp ...`` and ``impyard knowledge``: filled in by the knowledge core."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    del app
