"""Editing a data root's org policy in place, as an owner would, and the route tables
written into it."""

from __future__ import annotations

from pathlib import Path


def edit_org(home: Path, old: str, new: str) -> None:
    """Replace ``old`` (which must be there) with ``new`` in ``<home>/policy/org.toml``."""
    org = home / "policy" / "org.toml"
    text = org.read_text()
    assert old in text, f"{old!r} is not in {org}"
    org.write_text(text.replace(old, new, 1))


def route_toml(upstream: str, secret_env: str, *extra: str, value: str | None = None) -> str:
    """A ``[[gateway.route]]`` named llm that POSTs to ``upstream`` with the key read from
    ``secret_env`` in the Authorization header (as ``value`` says, where given), then
    ``extra`` lines: TOML to append to org.toml."""
    lines = [
        "[[gateway.route]]",
        'name = "llm"',
        f'upstream = "{upstream}"',
        'header = "Authorization"',
        *([f'value = "{value}"'] if value is not None else []),
        f'secret_env = "{secret_env}"',
        'methods = ["POST"]',
        *extra,
    ]
    return "\n" + "\n".join(lines) + "\n"
