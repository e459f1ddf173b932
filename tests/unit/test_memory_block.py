from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from impyard.home import Home
from impyard.memory import MemoryEntry, add_entry, memory_block, render_block, select_entries
from impyard.memory.block import HEADING, render_entry


def entry(n: int, channel: str | None, ts: str, text: str = "") -> MemoryEntry:
    return MemoryEntry(
        id=f"m_{n}",
        ts=ts,
        imp="yuko",
        channel=channel,
        user=None,
        kind="note",
        text=text or f"text {n}",
    )


def test_selection_puts_the_channel_first_then_imp_wide_newest_first_and_skips_other_channels() -> (
    None
):
    entries = [
        entry(1, "general", "2026-01-01T00:00:01Z"),
        entry(2, None, "2026-01-01T00:00:02Z"),
        entry(3, "random", "2026-01-01T00:00:03Z"),
        entry(4, "general", "2026-01-01T00:00:04Z"),
        entry(5, None, "2026-01-01T00:00:05Z"),
        entry(6, "general", "2026-01-01T00:00:04Z"),  # same stamp as 4, stored later: newer
    ]
    chosen = select_entries(entries, "general")
    assert [e.id for e in chosen] == ["m_6", "m_4", "m_1", "m_5", "m_2"]
    assert [e.id for e in select_entries(entries, "general", limit=2)] == ["m_6", "m_4"]
    assert [e.id for e in select_entries(entries, None)] == ["m_5", "m_2"]
    assert [e.id for e in select_entries(entries, "nowhere")] == ["m_5", "m_2"]


def test_query_filters_by_case_insensitive_substring_before_the_limit() -> None:
    entries = [
        entry(1, "general", "2026-01-01T00:00:01Z", "Ann prefers TEA"),
        entry(2, "general", "2026-01-01T00:00:02Z", "Bob prefers coffee"),
        entry(3, None, "2026-01-01T00:00:03Z", "team tea at four"),
    ]
    assert [e.id for e in select_entries(entries, "general", query="tea", limit=2)] == [
        "m_1",
        "m_3",
    ]


def test_empty_memory_gives_no_block(tmp_path: Path) -> None:
    home = Home(tmp_path)
    home.repo("yuko").mkdir(parents=True)
    assert memory_block(home, "yuko", "general") == ""
    add_entry(home, "yuko", "only in random", channel="random")
    assert memory_block(home, "yuko", "general") == ""


def test_memory_block_renders_the_selection_from_the_store(tmp_path: Path) -> None:
    home = Home(tmp_path)
    home.repo("yuko").mkdir(parents=True)
    add_entry(home, "yuko", "team-wide: answer in English", kind="preference")
    add_entry(home, "yuko", "Ann likes\nshort answers", channel="general", user="ann")
    add_entry(home, "yuko", "secret plans", channel="random")
    block = memory_block(home, "yuko", "general")
    assert block.startswith("## Memory\n")
    assert block.index("Ann likes") < block.index("team-wide")
    assert "@ann" in block and "#general" in block
    assert "\n  short answers" in block, "continuation lines stay inside their bullet"
    assert "secret plans" not in block
    assert len(memory_block(home, "yuko", "general", max_chars=len(block))) == len(block)
    smaller = memory_block(home, "yuko", "general", max_chars=len(block) - 1)
    assert "Ann likes" in smaller and "team-wide" not in smaller


channels = st.sampled_from(["general", "random", None])
entries_strategy = st.lists(
    st.builds(
        entry,
        n=st.integers(0, 10_000),
        channel=channels,
        ts=st.sampled_from([f"2026-01-0{d}T00:00:00Z" for d in range(1, 10)]),
        text=st.text(min_size=1, max_size=3000),
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(
    entries=entries_strategy,
    channel=channels,
    max_chars=st.integers(0, 12_000),
    limit=st.integers(1, 30),
)
def test_memory_block_never_exceeds_its_bound_and_keeps_whole_entries(
    entries: list[MemoryEntry], channel: str | None, max_chars: int, limit: int
) -> None:
    selected = select_entries(entries, channel, limit=limit)
    block = render_block(selected, max_chars)
    assert len(block) <= max_chars
    bullets = [render_entry(e) for e in selected]
    if block:
        assert block.startswith(HEADING)
        body = block[len(HEADING) :]
        # The body is a subsequence of whole bullets, in selection order.
        included = []
        rest = body
        for bullet in bullets:
            if rest.startswith(bullet):
                included.append(bullet)
                rest = rest[len(bullet) :]
        assert rest == "", "the block holds only whole entries"
        used = len(block)
    else:
        included = []
        used = len(HEADING)
    # Nothing left out would have fitted.
    for bullet in bullets:
        if bullet not in included:
            assert used + len(bullet) > max_chars
