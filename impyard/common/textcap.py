"""Text from outside cut to a bound, saying how much was cut.

A box or a remote chooses the length of what it writes: a 60,000-character frontmatter
key came back in every violation message, so in the manifest, the journal, the
candidate's commit message and a rework's task file; a restored commit message of one
50 MB line became 50 MB of HTML on the knowledge page. Whatever stores or shows such a
text keeps at most a bound of it, and the cut names how much went, as git's ``fsck``
caps and HTTP's 414 and 431 do, so a reader knows the text went on and by how much.
"""

from __future__ import annotations

#: The shortest bound ``cut`` takes: room for the marker and some of the text.
MIN_LIMIT = 64


def marker(cut_chars: int) -> str:
    """What ends a cut text: ``… [cut 59,800 characters]``."""
    return f"… [cut {cut_chars:,} characters]"


def cut(text: str, limit: int) -> str:
    """``text`` when it holds at most ``limit`` characters; else its start and a marker
    saying how many characters were cut, at most ``limit`` characters in all."""
    if limit < MIN_LIMIT:
        raise ValueError(f"limit must be at least {MIN_LIMIT}, not {limit}")
    if len(text) <= limit:
        return text
    # The marker for the whole text is never shorter than the one written: keep room for it.
    kept = limit - len(marker(len(text)))
    return text[:kept] + marker(len(text) - kept)


def cut_at_line(text: str, limit: int) -> str:
    """``text`` when it holds at most ``limit`` characters; else the whole lines that fit
    and a last line saying how many characters were cut, at most ``limit`` in all."""
    if limit < MIN_LIMIT:
        raise ValueError(f"limit must be at least {MIN_LIMIT}, not {limit}")
    if len(text) <= limit:
        return text
    room = limit - len(marker(len(text))) - 1  # the marker, and the newline ending it
    kept = text[: text.rfind("\n", 0, room) + 1]
    return kept + marker(len(text) - len(kept)) + "\n"


def cut_lines(text: str, line_limit: int, limit: int) -> str:
    """``text`` with each line cut to ``line_limit`` characters (``cut``), then the whole
    to ``limit`` at a line's end (``cut_at_line``)."""
    return cut_at_line("\n".join(cut(line, line_limit) for line in text.split("\n")), limit)


__all__ = ["MIN_LIMIT", "cut", "cut_at_line", "cut_lines", "marker"]
