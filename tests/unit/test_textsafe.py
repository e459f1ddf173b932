"""``one_line``: text a box chose, made safe to print as part of one terminal line."""

from __future__ import annotations

import unicodedata

import pytest

from impyard.common.textsafe import DEFAULT_LIMIT, ELLIPSIS, one_line


def printable(text: str) -> bool:
    """Nothing a terminal acts on: no control, format or separator character, no surrogate."""
    return all(unicodedata.category(c) not in {"Cc", "Cf", "Cs", "Zl", "Zp"} for c in text)


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("records/a\x1b[2J\nb.md", "records/a\\x1b[2J\\nb.md"),
        ("title \x1b]0;pwned\x07 here", "title \\x1b]0;pwned\\x07 here"),
        ("cr\rtab\tnul\x00del\x7f", "cr\\rtab\\tnul\\x00del\\x7f"),
        ("c1 csi \x9b2J nel \x85", "c1 csi \\x9b2J nel \\x85"),
        ("line\u2028para\u2029", "line\\u2028para\\u2029"),
        ("evil\u202etxt.md \u2066x\u2069", "evil\\u202etxt.md \\u2066x\\u2069"),
        ("lone \udcff surrogate", "lone \\udcff surrogate"),
    ],
)
def test_controls_are_escaped_as_text(raw: str, shown: str) -> None:
    assert one_line(raw) == shown
    assert printable(one_line(raw))


def test_ordinary_text_is_unchanged() -> None:
    text = "records/café/ünïcode — 東京 \\x1b as typed.md"
    assert one_line(text) == text


def test_the_result_can_be_printed_whatever_the_input() -> None:
    """A lone surrogate (a name decoded with surrogateescape) would make ``print`` raise."""
    one_line("bad \udc80 name").encode("utf-8")


def test_length_is_bounded_and_a_cut_is_marked() -> None:
    assert one_line("x" * 10, 10) == "x" * 10
    assert one_line("x" * 11, 10) == "x" * 9 + ELLIPSIS
    assert len(one_line("y" * 1_000_000)) == DEFAULT_LIMIT


def test_a_cut_never_splits_an_escape() -> None:
    # "ab" + "\x1b" is 6 characters escaped: with room for 5 the escape is left out whole.
    assert one_line("ab\x1bcdef", 6) == "ab" + ELLIPSIS
    assert one_line("ab\x1bcdef", 7) == "ab\\x1b" + ELLIPSIS
    # Escapes alone can push a short text over the limit.
    assert one_line("\n" * 5, 6) == "\\n\\n" + ELLIPSIS


def test_a_limit_must_leave_room() -> None:
    with pytest.raises(ValueError):
        one_line("x", 0)
    assert one_line("xy", 1) == ELLIPSIS
