"""Violation lists as they are stored: the first few in full, then counts.

A box writing 100,000 tiny bad files is rejected with 100,000 violations; every one
of them written into a journal line, a manifest and a candidate's commit message made a
13 MB journal line and a 16 MB manifest. Everything that persists a list keeps the first
``KEPT`` (sorted as validation reports them, so the same change always keeps the same
ones) and, when it had to cut, the total and a count per rule.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from impyard.knowledge.change import Violation

KEPT = 100


@dataclass(frozen=True)
class ViolationDigest:
    kept: list[dict[str, str]]
    total: int
    counts: dict[str, int]

    @property
    def truncated(self) -> bool:
        return self.total > len(self.kept)

    def summary_fields(self) -> dict[str, object]:
        """Extra journal/manifest fields; empty when nothing was cut."""
        if not self.truncated:
            return {}
        return {"violations_total": self.total, "violation_counts": self.counts}

    def lines(self) -> list[str]:
        """For a commit message: the kept violations, then what was left out."""
        lines = [f"- {v['path']!r}: {v['rule']}: {v['message']}" for v in self.kept]
        if self.truncated:
            by_rule = ", ".join(f"{rule} {n}" for rule, n in self.counts.items())
            lines.append(
                f"- ... and {self.total - len(self.kept)} more ({self.total} in all: {by_rule})"
            )
        return lines


def digest(violations: Sequence[Violation], kept: int = KEPT) -> ViolationDigest:
    counts = Counter(v.rule for v in violations)
    return ViolationDigest(
        kept=[v.as_dict() for v in violations[:kept]],
        total=len(violations),
        counts=dict(sorted(counts.items())),
    )
