"""The names of the refs the host writes, defined once and importing nothing: the
pygit2-free reader of main (``mainref``) and the pygit2 side (``repo``) both need them,
and a run's admission names a finished run's preserved refs without loading the lane."""

from __future__ import annotations

MAIN = "refs/heads/main"


def candidate_ref(run_id: str) -> str:
    """Where a run's change that did not land is kept (a candidate)."""
    return f"refs/candidates/{run_id}"


def quarantine_ref(run_id: str) -> str:
    """Where a quarantined run's tree is kept."""
    return f"refs/quarantine/{run_id}"
