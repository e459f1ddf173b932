"""Editing a data root's org policy in place, as an owner would."""

from __future__ import annotations

from pathlib import Path


def edit_org(home: Path, old: str, new: str) -> None:
    """Replace ``old`` (which must be there) with ``new`` in ``<home>/policy/org.toml``."""
    org = home / "policy" / "org.toml"
    text = org.read_text()
    assert old in text, f"{old!r} is not in {org}"
    org.write_text(text.replace(old, new, 1))
