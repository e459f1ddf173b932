"""Who took part in a channel's conversations, as its memory entries record them, and
whether a text names one of them.

A tainted run's way out (a task it files, or under ``any-run`` the files it writes) is
scanned against the participants of the conversation that reached it: the user ids and
display names its entries were recorded under, the mentions (``@name``, ``<@U123>``)
and the email addresses in their texts. A match is a whole word, ignoring case. A term
shorter than three characters is not looked for: it would match half the words of any
prompt. This is a tripwire for the obvious, not a filter: a paraphrase passes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from impyard.home import Home
from impyard.memory.entry import MemoryEntry
from impyard.memory.store import read_memory

#: The shortest term looked for.
MIN_TERM_CHARS = 3
#: What a refused text is told (the term itself is not repeated back).
NAMES_A_PARTICIPANT = "names a conversation participant; that belongs in memory"

_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
_SLACK_MENTION = re.compile(r"<@([\w.-]+)(?:\|[^>]*)?>")
_MENTION = re.compile(r"(?<![\w@.+-])@([\w][\w.-]*)")


@dataclass(frozen=True)
class Participant:
    """One term, and what kind of name it is (``user id``, ``display name``, ``mention``,
    ``email address``): what a refusal and its journal record say instead of the term."""

    kind: str
    term: str


class Participants:
    """The participants of one conversation, compiled once into one matcher."""

    def __init__(self, found: Iterable[Participant]) -> None:
        by_term: dict[str, Participant] = {}
        for each in found:
            term = each.term.strip()
            if len(term) >= MIN_TERM_CHARS:
                by_term.setdefault(term.casefold(), Participant(each.kind, term))
        self.by_term = by_term
        # Longest first, so a name that contains another one is reported as itself.
        terms = sorted(by_term, key=len, reverse=True)
        alternation = "|".join(re.escape(term) for term in terms)
        self._pattern = re.compile(rf"(?<!\w)(?:{alternation})(?!\w)", re.IGNORECASE)

    def __len__(self) -> int:
        return len(self.by_term)

    def named_in(self, text: str) -> list[Participant]:
        """The participants ``text`` names, each once, in order of appearance."""
        if not self.by_term:
            return []
        named: dict[str, Participant] = {}
        for match in self._pattern.finditer(text):
            key = match.group(0).casefold()
            if key in self.by_term:
                named.setdefault(key, self.by_term[key])
        return list(named.values())


def participants_of(entries: Iterable[MemoryEntry]) -> Participants:
    """Every name the entries record: their users, and the mentions and addresses in them."""
    found: list[Participant] = []
    for entry in entries:
        if entry.user:
            kind = "display name" if " " in entry.user.strip() else "user id"
            found.append(Participant(kind, entry.user))
        found += [Participant("email address", m) for m in _EMAIL.findall(entry.text)]
        without_emails = _EMAIL.sub(" ", entry.text)
        found += [Participant("mention", m) for m in _SLACK_MENTION.findall(without_emails)]
        found += [Participant("mention", m.rstrip(".-")) for m in _MENTION.findall(without_emails)]
    return Participants(found)


def channel_participants(home: Home, imp: str, channel: str | None) -> Participants:
    """The participants of ``channel``'s conversations with ``imp``: every entry a run in
    that channel could be given (the channel's own and the imp-wide ones)."""
    entries = read_memory(home, imp).entries
    return participants_of(e for e in entries if e.channel is None or e.channel == channel)
