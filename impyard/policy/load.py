"""Reading policy files into raw tables and typed models, turning every problem into a violation."""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from impyard.common.names import IMP_NAME
from impyard.home import Home
from impyard.policy.models import Policy
from impyard.policy.violation import PolicyViolation

Table = dict[str, Any]

_RANGE_ERRORS = {"greater_than", "greater_than_equal", "less_than", "less_than_equal"}
_LENGTH_ERRORS = {"too_short", "too_long", "string_too_short", "string_too_long"}


@dataclass(frozen=True)
class Source:
    """One policy file as read: its path, raw bytes (for the fingerprint) and parsed table."""

    path: Path
    data: bytes
    table: Table | None  # None when the file is unreadable or not TOML


def read_source(path: Path, violations: list[PolicyViolation]) -> Source:
    try:
        data = path.read_bytes()
    except OSError as exc:
        violations.append(
            PolicyViolation(str(path), "", "unreadable", f"cannot read: {exc.strerror or exc}")
        )
        return Source(path, b"", None)
    try:
        table = tomllib.loads(data.decode())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        violations.append(PolicyViolation(str(path), "", "toml-syntax", toml_error(exc)))
        return Source(path, data, None)
    return Source(path, data, table)


_TOML_AT = re.compile(r"^(?P<error>.*) \(at line (?P<line>\d+), column (?P<column>\d+)\)$")


def toml_error(exc: ValueError) -> str:
    """``line 3, column 5: not valid TOML: <what>``: tomllib puts where at the end of its
    message, and an owner looks for the line first."""
    found = _TOML_AT.match(str(exc))
    if found is None:
        return f"not valid TOML: {exc}"
    where = f"line {found['line']}, column {found['column']}"
    return f"{where}: not valid TOML: {found['error']}"


def overlay_paths(home: Home) -> dict[str, Path]:
    """Every ``policy/imps/*.toml``, by imp name (the file stem), sorted."""
    if not home.imp_policy_dir.is_dir():
        return {}
    return {path.stem: path for path in sorted(home.imp_policy_dir.glob("*.toml"))}


def check_overlay_name(imp: str, path: Path) -> PolicyViolation | None:
    if IMP_NAME.fullmatch(imp):
        return None
    return PolicyViolation(
        str(path), "", "bad-imp-name", f"{imp!r} is not a valid imp name, so no imp would use it"
    )


def merge(base: Table, overlay: Table) -> Table:
    """``overlay`` over ``base``: tables merge key by key; any other value (lists too) replaces."""
    merged = dict(base)
    for key, value in overlay.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def dotted(loc: tuple[str | int, ...]) -> str:
    """('gateway', 'allow', 0, 'host') -> 'gateway.allow[0].host'."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out


def lookup(table: Table | None, loc: tuple[str | int, ...]) -> Any:
    """The raw value at ``loc`` in ``table``, or None when it is absent."""
    node: Any = table
    for part in loc:
        in_list = isinstance(part, int) and isinstance(node, list) and part < len(node)
        in_table = isinstance(part, str) and isinstance(node, dict) and part in node
        if in_list or in_table:
            node = node[part]
        else:
            return None
    return node


def _rule(error_type: str) -> str:
    if error_type == "extra_forbidden":
        return "unknown-key"
    if error_type == "missing":
        return "missing-key"
    if error_type in _RANGE_ERRORS or error_type in _LENGTH_ERRORS:
        return "out-of-range"
    if error_type.endswith(("_type", "_parsing")):
        return "wrong-type"
    return "invalid-value"


def _shown_input(error: Any, loc: tuple[str | int, ...]) -> Any:
    """The rejected value as a violation may show it. A refused ``[box.env]`` value may be
    a secret pasted in the wrong place: it is never echoed back."""
    if error["type"] == "missing":
        return None
    if loc[:2] == ("box", "env") and len(loc) == 3 and error["loc"][-1] != "[key]":
        return "<hidden>"
    return error.get("input")


def validate(
    table: Table, path: Path, org: Table | None = None
) -> tuple[Policy | None, list[PolicyViolation]]:
    """Type- and range-check ``table``; ``org`` (for an overlay) supplies each key's org value."""
    try:
        return Policy.model_validate(table), []
    except ValidationError as exc:
        violations = []
        for error in exc.errors():
            # pydantic ends the location of an error in a table's key (not its value) with
            # '[key]'; the key already names the place.
            loc = tuple(part for part in error["loc"] if part != "[key]")
            message = error["msg"].removeprefix("Value error, ")
            if error["type"] == "extra_forbidden":
                message = "unknown key"
            violations.append(
                PolicyViolation(
                    file=str(path),
                    key=dotted(loc),
                    rule=_rule(error["type"]),
                    message=message,
                    org_value=lookup(org, loc),
                    attempted_value=_shown_input(error, loc),
                    loc=loc,
                )
            )
        return None, violations
