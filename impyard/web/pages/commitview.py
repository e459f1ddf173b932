"""A commit's message as a console page shows it: its summary, first paragraph, author and
trailers, each bounded.

The lane writes short messages, but main may hold commits it did not write (a restored
backup, a commit an owner made): a summary of one 50 MB line was served whole, 50 MB of
HTML. Each part is cut to its bound, and the cut says how much it cut.
"""

from __future__ import annotations

import pygit2

from impyard.common.textcap import cut, cut_lines

#: Characters of a summary line, and of an author's name, a page shows.
SUMMARY_CHARS = 1_000
AUTHOR_CHARS = 200
#: Characters of a first paragraph a page shows (the lane's is its summary line).
PARAGRAPH_CHARS = 10_000
#: Trailers a page shows (the lane writes at most ten distinct keys), and their parts.
TRAILERS = 32
TRAILER_KEY_CHARS = 100
TRAILER_VALUE_CHARS = 1_000
#: The key of the last trailer shown when some were left out (no trailer has it: git's
#: trailer keys are letters, digits and hyphens).
MORE = "…"


def summary(commit: pygit2.Commit) -> str:
    message = commit.message
    end = message.find("\n")
    return cut(message if end < 0 else message[:end], SUMMARY_CHARS)


def first_paragraph(commit: pygit2.Commit) -> str:
    message = commit.message
    end = message.find("\n\n")
    paragraph = message if end < 0 else message[:end]
    return cut_lines(paragraph, SUMMARY_CHARS, PARAGRAPH_CHARS)


def author(commit: pygit2.Commit) -> str:
    return cut(commit.author.name, AUTHOR_CHARS)


def trailers(commit: pygit2.Commit) -> dict[str, str]:
    """The first ``TRAILERS`` trailers, each cut; then, under ``MORE``, how many were not."""
    found = dict(commit.message_trailers)
    shown = {
        cut(key, TRAILER_KEY_CHARS): cut(value, TRAILER_VALUE_CHARS)
        for key, value in list(found.items())[:TRAILERS]
    }
    if len(found) > TRAILERS:
        shown[MORE] = f"{len(found) - TRAILERS:,} more trailers not shown"
    return shown
