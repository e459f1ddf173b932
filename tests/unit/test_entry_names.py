"""A tree entry's name is judged on its bytes when it is plainly safe; every other name
by the rules on its text. The two must never disagree."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from impyard.knowledge.validation.pathnames import (
    INSTRUCTION_DIRS,
    INSTRUCTION_FILES,
    entry_name_rules,
    entry_text_rules,
)

SPECIAL = sorted(
    INSTRUCTION_FILES
    | INSTRUCTION_DIRS
    | {"con", "nul.txt", "com1", "lpt9.md", "aux.tar.gz", "conin$", "git~1", ".git", "note.md"}
)
PIECES = ["a", "Z", "0", "-", "_", ".", " ", "/", "\\", ":", "\u00e9", "\x00", "\u200c"]


def cased(name: str, upper: list[bool]) -> str:
    flags = (upper + [False] * len(name))[: len(name)]
    return "".join(c.upper() if up else c for c, up in zip(name, flags, strict=True))


@given(
    special=st.sampled_from(SPECIAL),
    upper=st.lists(st.booleans(), max_size=24),
    before=st.lists(st.sampled_from(PIECES), max_size=3),
    after=st.lists(st.sampled_from(PIECES), max_size=3),
    directory=st.booleans(),
)
def test_the_bytes_and_the_text_agree_on_every_name(
    special: str, upper: list[bool], before: list[str], after: list[str], directory: bool
) -> None:
    name = "".join(before) + cased(special, upper) + "".join(after)
    raw = name.encode("utf-8", "surrogateescape")
    assert entry_name_rules(raw, directory=directory) == entry_text_rules(raw, directory=directory)


def test_plain_names_pass_and_instruction_files_do_not() -> None:
    assert entry_name_rules(b"one-note--n_0_1.md", directory=False) == {}
    assert entry_name_rules(b"records", directory=True) == {}
    assert "instruction-file" in entry_name_rules(b"Agents.MD", directory=False)
    assert "instruction-file" in entry_name_rules(b".GitHub", directory=True)
    assert "unportable-name" in entry_name_rules(b"Nul.md", directory=False)
    assert "unportable-name" in entry_name_rules(b"note.", directory=False)
    assert entry_name_rules(b"claude.md", directory=True) == {}  # a directory may be so named
