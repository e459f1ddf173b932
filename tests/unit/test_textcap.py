"""Text from outside cut to a bound: the cut keeps the start, fits the bound and says how
much it cut; a violation is bounded wherever it is kept, and so is what reads an older
record back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from impyard.common.textcap import cut, cut_at_line, cut_lines, marker
from impyard.knowledge.change import MESSAGE_CHARS, Violation
from impyard.knowledge.validation.violations import digest
from tests.helpers.cli import Cli
from tests.helpers.repo import NS, RUN, make_imp
from tests.unit.test_repair import write_manifest


@pytest.mark.parametrize("length", [1_000, 1_001, 60_000, 50_000_000])
def test_a_cut_keeps_the_start_fits_the_bound_and_says_how_much(length: int) -> None:
    text = "a" * length
    shown = cut(text, 1_000)
    if length <= 1_000:
        assert shown == text
        return
    kept = shown.index("…")
    assert len(shown) <= 1_000 and kept > 900
    assert shown.endswith(f"… [cut {length - kept:,} characters]")


def test_a_cut_at_a_line_keeps_whole_lines_and_ends_with_one_saying_how_much() -> None:
    text = "".join(f"line {n:04}\n" for n in range(1_000))  # 10 characters a line
    shown = cut_at_line(text, 500)
    assert len(shown) <= 500 and shown.endswith(" characters]\n")
    *whole, last = shown.splitlines()
    assert whole == [f"line {n:04}" for n in range(len(whole))]
    assert last == f"… [cut {len(text) - 10 * len(whole):,} characters]"
    assert cut_at_line(text, len(text)) == text


def test_cut_lines_bounds_each_line_and_the_whole() -> None:
    text = "\n".join(["x" * 5_000, "short", "y" * 5_000] * 100)
    shown = cut_lines(text, 200, 2_000)
    assert len(shown) <= 2_000
    assert all(len(line) <= 200 for line in shown.splitlines())
    assert "short" in shown.splitlines()


def test_a_violation_keeps_at_most_its_bound_of_a_message_wherever_it_goes() -> None:
    v = Violation("records/a.md", "frontmatter", "m" * 60_000)
    assert len(v.message) == MESSAGE_CHARS and v.message.endswith(" characters]")
    cut_chars = 60_000 - v.message.index("…")
    assert v.message.endswith(f"[cut {cut_chars:,} characters]")
    found = digest([v] * 3)
    assert all(len(kept["message"]) == MESSAGE_CHARS for kept in found.kept)
    assert max(len(line) for line in found.lines()) < MESSAGE_CHARS + 100


def test_runs_show_of_an_older_record_with_a_huge_message_shows_it_cut(tmp_path: Path) -> None:
    """A manifest written before messages were bounded is bounded as it is read back."""
    home, repo = make_imp(tmp_path)
    violation = Violation(f"records/vendors/acme--{NS}_1.md", "frontmatter", "PLACEHOLDER")
    write_manifest(
        home, str(repo.head.target), checkpoint="rejected", validation_errors=[violation]
    )
    record = json.loads(home.manifest(RUN).read_text())
    record["validation_errors"][0]["message"] = "z" * 60_000
    home.manifest(RUN).write_text(json.dumps(record))

    shown = Cli(home=home.root)("runs", "show", RUN)
    assert shown.code == 0, shown.stderr
    assert len(shown.stdout) < MESSAGE_CHARS + 3_000
    kept = MESSAGE_CHARS - len(marker(60_000))
    assert f"z… [cut {60_000 - kept:,} characters]" in shown.stdout
