"""Is the policy runs use the one the owner wrote: compiled.json against the files now."""

from __future__ import annotations

from impyard.home import Home
from impyard.policy.compile import compiled_at, compiled_digest, undeployed_changes
from impyard.status.model import PolicySection


def policy_section(home: Home) -> PolicySection:
    changes = undeployed_changes(home)
    return PolicySection(
        compiled_at=compiled_at(home),
        digest=compiled_digest(home),
        deployed=not changes,
        changes=changes,
    )
