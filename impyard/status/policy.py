"""Is the policy runs use the one the owner wrote: compiled.json against the files now."""

from __future__ import annotations

from impyard.home import Home
from impyard.policy.compile import (
    compiled_at,
    compiled_digest,
    source_violations,
    undeployed_changes,
)
from impyard.status.model import PolicySection


def policy_section(home: Home) -> PolicySection:
    changes = undeployed_changes(home)
    # Only changed files can hold what a deploy refuses; a current policy compiled once.
    invalid = [_line(v.file, v.key, v.message) for v in source_violations(home)] if changes else []
    return PolicySection(
        compiled_at=compiled_at(home),
        digest=compiled_digest(home),
        deployed=not changes,
        changes=changes,
        invalid=invalid,
    )


def _line(file: str, key: str, message: str) -> str:
    return f"{file}: {key}: {message}" if key else f"{file}: {message}"
