"""The shared test helpers build what they claim."""

from __future__ import annotations

from pathlib import Path

from tests.helpers.repo import change_of, make_imp


def test_change_of_puts_blobs_in_the_odb(tmp_path: Path) -> None:
    _, repo = make_imp(tmp_path)
    change = change_of(repo, {"records/a/b.md": (b"x", True)})
    state = change.written["records/a/b.md"]
    assert repo[state.blob].data == b"x"
    assert state.executable and state.size == 1
