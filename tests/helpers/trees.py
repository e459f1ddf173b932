"""Tree building compared across ways: what a build gives, or how it refuses."""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import strategies as st

from impyard.common.errors import KnowledgeError
from impyard.knowledge.store.trees import PathConflict

# Names whose git order differs from plain string order once directories count as "name/".
segment = st.sampled_from(["a", "a.b", "a-b", "a0", "b", "B", "\u00e9"])
path = st.lists(segment, min_size=1, max_size=3).map("/".join)


def outcome(build: Callable[[], object]) -> tuple[str, object]:
    """("tree", what ``build`` returned), ("conflict", the path), or ("refused", the path)."""
    try:
        return "tree", build()
    except PathConflict as exc:
        return "conflict", exc.path
    except KnowledgeError as exc:
        return "refused", str(exc).split(":")[0]
