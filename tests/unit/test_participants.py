"""The participants of a channel's conversations, as memory records them, and whether a
text names one: the scan a tainted run's filed task (and, under ``any-run``, its files)
gets."""

from __future__ import annotations

from pathlib import Path

from impyard.home import Home
from impyard.memory import MemoryEntry, add_entry
from impyard.memory.participants import channel_participants, participants_of


def entry(text: str, user: str | None = None, channel: str | None = "support") -> MemoryEntry:
    return MemoryEntry(
        id="m_1",
        ts="2026-01-01T00:00:00Z",
        imp="yuko",
        channel=channel,
        user=user,
        kind="note",
        text=text,
    )


def kinds_named(text: str, *entries: MemoryEntry) -> list[str]:
    return [p.kind for p in participants_of(entries).named_in(text)]


def test_user_ids_and_display_names_are_found_as_whole_words_ignoring_case() -> None:
    entries = (entry("likes tea", user="U042ABC"), entry("asked twice", user="Ada Lovelace"))
    assert kinds_named("ask u042abc about it", *entries) == ["user id"]
    assert kinds_named("as ADA LOVELACE said", *entries) == ["display name"]
    # Part of a longer word is not the name.
    assert kinds_named("see U042ABCD and Ada Lovelaces", *entries) == []


def test_mentions_and_email_addresses_in_entry_texts_are_participants() -> None:
    entries = (entry("<@U77XY> pinged @grace.h, cc ops-lead@example.com"),)
    assert kinds_named("tell u77xy", *entries) == ["mention"]
    assert kinds_named("per grace.h.", *entries) == ["mention"]
    assert kinds_named("mail OPS-LEAD@example.com", *entries) == ["email address"]
    # The address's domain part is not a mention of someone called "example".
    assert kinds_named("the example domain", *entries) == []


def test_terms_shorter_than_three_characters_are_not_looked_for() -> None:
    entries = (entry("hi", user="al"),)
    assert len(participants_of(entries)) == 0
    assert kinds_named("al wrote al", *entries) == []


def test_each_participant_is_named_once_in_order_of_appearance() -> None:
    entries = (entry("x", user="bob99"), entry("mail carol@example.org"))
    found = participants_of(entries).named_in("carol@example.org and bob99, bob99 again")
    assert [p.term for p in found] == ["carol@example.org", "bob99"]


def test_a_channel_gets_its_own_and_imp_wide_participants_never_another_channels(
    tmp_path: Path,
) -> None:
    home = Home(tmp_path)
    home.repo("yuko").mkdir(parents=True)
    add_entry(home, "yuko", "prefers short answers", channel="support", user="dana")
    add_entry(home, "yuko", "team lead", user="erin")
    add_entry(home, "yuko", "said hello", channel="random", user="frank")
    found = channel_participants(home, "yuko", "support")
    assert sorted(found.by_term) == ["dana", "erin"]
