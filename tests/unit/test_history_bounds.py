"""The lane's history facts stay within their bounds when the lane made every commit."""

from __future__ import annotations

import pytest

from impyard.knowledge.store import history
from impyard.knowledge.store.history import Added


def added(n: int) -> Added:
    return Added(paths=(f"records/note-{n}.md",), objects=frozenset(), trees=())


def test_remembered_paths_stay_within_max_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    # Under serve every commit is the lane's own: remembered, never missed by ``paths``.
    monkeypatch.setattr(history, "MAX_PATHS", 50)
    facts = history._Facts()
    for n in range(1000):
        facts.remember(f"{n:040x}", added(n))
    assert facts._path_count <= 50
    assert sum(len(paths) for paths in facts._paths.values()) == facts._path_count
    # The newest are the ones kept.
    assert facts._paths[f"{999:040x}"] == ("records/note-999.md",)


def test_remembered_paths_stay_within_max_commits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(history, "MAX_COMMITS", 40)
    facts = history._Facts()
    for n in range(1000):
        facts.remember(f"{n:040x}", added(n))
    assert len(facts._paths) == 40
    assert facts._path_count == 40
