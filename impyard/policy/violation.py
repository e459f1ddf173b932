"""A policy violation and the error that carries every one of them."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from impyard.common.errors import ConfigError

# Every rule a violation may name, with the sentence the README documents.
RULES: dict[str, str] = {
    "toml-syntax": "the file is not valid TOML",
    "unreadable": "the file cannot be read",
    "bad-imp-name": "overlay file name is not a valid imp name",
    "unknown-key": "the key is not part of the policy (typo?)",
    "missing-key": "a required key is missing",
    "wrong-type": "the value has the wrong type",
    "out-of-range": "the value is outside its allowed range",
    "invalid-value": "the value is not one the key accepts",
    "enlarges-limit": "an overlay may lower a limit, never raise it above the org's",
    "enables-feature": "an overlay may turn a feature off, never on when the org has it off",
    "removes-requirement": "an overlay may not turn off a requirement the org sets",
    "org-only": "only the org policy sets this key",
    "not-granted": "an overlay may keep or narrow org grants, never add one",
    "weakens-isolation": "an overlay may move a box from runc to runsc, never back",
    "runtime-unavailable": "the engine has no runtime of that name registered",
}


def render(value: Any) -> str:
    """A value as it would be written in TOML-ish JSON, for one-line messages."""
    if value is None:
        return "(unset)"
    return json.dumps(value, sort_keys=True, default=str)


@dataclass(frozen=True)
class PolicyViolation:
    file: str
    key: str
    rule: str
    message: str
    org_value: Any = None
    attempted_value: Any = None
    # Where a type/range error sits in the parsed table; lets a check skip the broken keys.
    loc: tuple[str | int, ...] = field(default=(), compare=False, repr=False)

    def line(self) -> str:
        key = self.key or "(file)"
        return (
            f"{self.file}: {key}: {self.message} "
            f"[rule {self.rule}; org {render(self.org_value)}; "
            f"attempted {render(self.attempted_value)}]"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "key": self.key,
            "rule": self.rule,
            "message": self.message,
            "org_value": self.org_value,
            "attempted_value": self.attempted_value,
        }


class PolicyError(ConfigError):
    """Policy files are invalid; ``violations`` lists every problem found, not just the first."""

    def __init__(self, violations: list[PolicyViolation], *, action: str = "nothing deployed"):
        count = len(violations)
        header = f"policy has {count} violation{'s' if count != 1 else ''}; {action}"
        super().__init__("\n".join([header, *(f"  {v.line()}" for v in violations)]))
        self.violations = violations
