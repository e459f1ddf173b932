"""Frontmatter is a safe YAML subset: what we accept, any YAML reader reads the same way."""

from __future__ import annotations

from datetime import datetime

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from impyard.knowledge.validation.records import (
    Frontmatter,
    check_frontmatter,
    frontmatter_errors,
    is_utc_timestamp,
    parse_frontmatter,
)
from tests.helpers.repo import NS, note_text

ID = f"{NS}_1"
WHEN = "2026-07-11T12:00:00Z"
RCPT = "rcpt_0123456789abcdef0123"
RCPT2 = "rcpt_fedcba98765432100000"


def front(*lines: str) -> str:
    return "\n".join(["---", *lines, "---", "", "body"]) + "\n"


def block_of(text: str) -> str:
    """The lines between the opening and the closing '---': what frontmatter readers parse."""
    lines = text.split("\n")
    end = next(i for i in range(1, len(lines)) if lines[i].rstrip("\r") == "---")
    return "\n".join(lines[1:end])


def assert_yaml_reads_the_same(text: str, parsed: Frontmatter) -> None:
    """``yaml.safe_load`` sees exactly our keys and values (a timestamp as the same instant)."""
    block = block_of(text)
    for loaded in (yaml.safe_load(block), next(yaml.safe_load_all(text))):
        assert isinstance(loaded, dict), loaded
        assert set(loaded) == set(parsed.fields)
        for key, ours in parsed.fields.items():
            theirs = loaded[key]
            if isinstance(ours, list):
                assert theirs == ours
                assert all(isinstance(item, str) for item in theirs)
            elif isinstance(theirs, datetime):
                assert is_utc_timestamp(ours), ours
                assert theirs == datetime.fromisoformat(ours.replace("Z", "+00:00"))
            else:
                assert isinstance(theirs, str) and theirs == ours, (theirs, ours)
    # Without implicit typing every scalar is its text: ours must be that text exactly.
    assert yaml.load(block, Loader=yaml.BaseLoader) == parsed.fields


@pytest.mark.parametrize(
    "text",
    [
        note_text(ID),
        note_text(ID, urls=[]),
        note_text(ID, urls=["https://a.example/x?y=1#frag", "http://b/c,d"]),
        # what box/impyard-note writes
        f"---\nid: {ID}\ncreated_at: {WHEN}\nsource_urls: []\n---\n",
        f"---\nid: {ID}\ncreated_at: {WHEN}\nsource_urls:\n- https://x.example/a\n---\nbody\n",
        front(f"id: '{ID}'", f'created_at: "{WHEN}"', "source_urls:", "  - 'https://x/a''b'"),
        front(
            "# a comment",
            f"id:   {ID}   ",
            "",
            f"created_at: {WHEN}",
            "source_urls:",
            "",
            "- https://a.example/p:q",
        ),
        front(f"id: {ID}", "created_at: 2026-07-11T12:00:00.250+00:00"),
        f"---\r\nid: {ID}\r\ncreated_at: {WHEN}\r\n---\r\nbody\r\n",
        note_text(ID, receipts=[RCPT, RCPT2]),
        note_text(ID, receipts=[RCPT, RCPT2], partial=[RCPT2]),
        front(f"id: {ID}", f"created_at: {WHEN}", "source_urls: []", "source_receipts: []"),
        front(
            f"id: {ID}",
            f"created_at: {WHEN}",
            "source_receipts:",
            f"  - '{RCPT}'",
            f'  - "{RCPT2}"',
            "source_urls:",
            "  - https://x.example/a",
        ),
    ],
)
def test_the_documented_forms_are_accepted_and_read_the_same(text: str) -> None:
    parsed = parse_frontmatter(text)
    assert parsed.errors == []
    assert frontmatter_errors(text, ID) == ([], False)
    assert_yaml_reads_the_same(text, parsed)


@pytest.mark.parametrize(
    ("lines", "fragment"),
    [
        ((f"id:{ID}", f"created_at: {WHEN}"), "space after ':'"),
        ((f"id: {ID}", f"created_at:{WHEN}"), "space after ':'"),
        ((f"id: &a {ID}", f"created_at: {WHEN}"), "anchor"),
        (("id: *a", f"created_at: {WHEN}"), "alias"),
        ((f"id: !!str {ID}", f"created_at: {WHEN}"), "tag"),
        ((f"id: {ID}", f"created_at: !!timestamp {WHEN}"), "tag"),
        ((f"id: {ID}", f"created_at: {WHEN}", "source_urls: [https://x/a]"), "flow"),
        ((f"id: {ID}", f"created_at: {WHEN}", "source_urls: {a: b}"), "flow"),
        ((f"id: {ID}", f"created_at: {WHEN}", "source_urls:", "- [https://x/a]"), "flow"),
        ((f"id: {ID}", "...", f"created_at: {WHEN}"), "document marker"),
        ((f"id: {ID}", "--- ", f"created_at: {WHEN}"), "document marker"),
        ((f"id: {ID}", "----", f"created_at: {WHEN}"), "document marker"),
        (("id: |", f"  {ID}", f"created_at: {WHEN}"), "block scalar"),
        (("id: >-", f"  {ID}", f"created_at: {WHEN}"), "block scalar"),
        ((f"id: {ID}", f"created_at: {WHEN}", "source_urls:", "\t- https://x/a"), "tab"),
        ((f"id: {ID}", f"created_at: {WHEN}", "source_urls:", "-\thttps://x/a"), "tab"),
        ((f"id: {ID}", f"id: {ID}", f"created_at: {WHEN}"), "twice"),
        ((f"id: {ID}", f"created_at: {WHEN}", "title: Acme"), "'title'"),
        ((f"id: {ID}", f"created_at: {WHEN}", "Id: x"), "'Id'"),
        ((f"id: %{ID}", f"created_at: {WHEN}"), "indicator"),
        ((f"id: @{ID}", f"created_at: {WHEN}"), "indicator"),
        ((f"id: `{ID}", f"created_at: {WHEN}"), "indicator"),
        ((f'id: "{ID}', f"created_at: {WHEN}"), "not closed"),
        ((f"id: '{ID}", f"created_at: {WHEN}"), "not closed"),
        ((f'id: "{ID}" x', f"created_at: {WHEN}"), "after the closing quote"),
        ((f'id: "{ID}\\x41"', f"created_at: {WHEN}"), "backslash"),
        ((f"id: {ID}: x", f"created_at: {WHEN}"), "': '"),
        ((f"id: {ID}:", f"created_at: {WHEN}"), "':'"),
        ((f"id: {ID} # note", f"created_at: {WHEN}"), "' #'"),
        ((f"id: {ID}", f"created_at: {WHEN}", "source_urls:", "- https://x/a #x"), "' #'"),
        ((f"id: {ID}", f"created_at: {WHEN}", "source_urls:", "- https://x/a: b"), "': '"),
        (("id: yes", f"created_at: {WHEN}"), "boolean or null"),
        (("id: Null", f"created_at: {WHEN}"), "boolean or null"),
        (("id: ~", f"created_at: {WHEN}"), "indicator"),
        (("id: 0x1F", f"created_at: {WHEN}"), "quote it"),
        ((f"id: {ID}", "created_at: 2026-07-11"), "not an ISO-8601 UTC timestamp"),
        ((f"id: {ID}", "created_at: 2026-07-11 12:00:00Z"), "not an ISO-8601 UTC timestamp"),
        ((f"id: {ID}", f"created_at: {WHEN}", "source_urls:"), "no value"),
        (("id:", f"created_at: {WHEN}"), "no value"),
        ((f"id: {ID}", "  continued", f"created_at: {WHEN}"), "continues"),
        ((f"id: {ID}", f"created_at: {WHEN}", "source_urls:", "- https://x/a", "  b"), "continues"),
        (
            (
                f"id: {ID}",
                f"created_at: {WHEN}",
                "source_urls:",
                "  - https://x/a",
                "- https://x/b",
            ),
            "line up",
        ),
        ((f"id: {ID}", f"created_at: {WHEN}", "source_urls:", "-"), "empty list item"),
        ((f"id: {ID}", f"created_at: {WHEN}", "source_urls:", "- - https://x/a"), "indicator"),
        ((f"id: {ID}", f"created_at: {WHEN}", "source_urls:", "-https://x/a"), "unreadable"),
        ((f"id: {ID}", f"created_at: {WHEN}", "- https://x/a"), "outside a list"),
        (
            (f"id: {ID}", f"created_at: {WHEN}", "source_urls: []", "- https://x/a"),
            "outside a list",
        ),
        ((f"id: {ID}", f"created_at: {WHEN}", "? source_urls"), "unreadable"),
        ((f'"id": {ID}', f"created_at: {WHEN}"), "unreadable"),
        ((f"id : {ID}", f"created_at: {WHEN}"), "unreadable"),
        ((f" id: {ID}", f"created_at: {WHEN}"), "continues"),
        ((f"id: {ID}\rcreated_at: x", f"created_at: {WHEN}"), "line break"),
        ((f"id: {ID}\u2028created_at: x", f"created_at: {WHEN}"), "line break"),
        ((f"id: {ID}\x85created_at: x", f"created_at: {WHEN}"), "line break"),
        ((f"id: {ID}\x07", f"created_at: {WHEN}"), "control character"),
        ((f"id: \ufeff{ID}", f"created_at: {WHEN}"), "byte order mark"),
        ((f"id: \u00a0{ID}", f"created_at: {WHEN}"), "quote it"),
        (("%YAML 1.1", f"id: {ID}", f"created_at: {WHEN}"), "unreadable"),
        (("# only a comment",), "no keys"),
    ],
)
def test_frontmatter_that_yaml_reads_otherwise_is_refused(
    lines: tuple[str, ...], fragment: str
) -> None:
    text = front(*lines)
    parsed = parse_frontmatter(text)
    assert any(fragment in e for e in parsed.errors), parsed.errors
    errors, _ = frontmatter_errors(text, ID)
    assert any(fragment in e for e in errors), errors


def test_a_key_glued_to_its_value_is_not_also_reported_missing() -> None:
    errors, _ = frontmatter_errors(front(f"id:{ID}", f"created_at: {WHEN}"), ID)
    assert len(errors) == 1 and "space after ':'" in errors[0], errors


def test_an_unknown_key_is_named_and_its_items_are_not_separate_errors() -> None:
    text = front(f"id: {ID}", f"created_at: {WHEN}", "tags:", "- a", "- b")
    errors, _ = frontmatter_errors(text, ID)
    assert len(errors) == 1, errors
    assert "'tags'" in errors[0] and "extra keys are forbidden" in errors[0]


def test_every_problem_is_listed() -> None:
    text = front(f"id:{ID}", "created_at: yes", "title: x", "source_urls: [a]")
    errors, _ = frontmatter_errors(text, ID)
    assert len(errors) == 4, errors


def test_a_list_for_a_single_value_key_is_explained() -> None:
    errors, _ = frontmatter_errors(front("id: []", f"created_at: {WHEN}"), ID)
    assert any("single value" in e for e in errors), errors


def test_cited_receipts_are_read_in_order() -> None:
    checked = check_frontmatter(note_text(ID, receipts=[RCPT2, RCPT]), ID)
    assert checked.errors == []
    assert checked.source_receipts == [RCPT2, RCPT]
    assert checked.source_urls == ["https://example.com/report"]
    assert checked.partial_receipts == []


def test_receipts_marked_partial_are_read() -> None:
    checked = check_frontmatter(note_text(ID, receipts=[RCPT2, RCPT], partial=[RCPT]), ID)
    assert checked.errors == []
    assert (checked.source_receipts, checked.partial_receipts) == ([RCPT2, RCPT], [RCPT])


@pytest.mark.parametrize(
    ("lines", "fragment"),
    [
        (("source_receipts:", "- rcpt_0123"), "is not a receipt id"),
        (("source_receipts:", f"- {RCPT.upper().replace('RCPT', 'rcpt')}"), "is not a receipt id"),
        (("source_receipts:", f"- {RCPT}0"), "is not a receipt id"),
        (("source_receipts:", f"- x{RCPT}"), "is not a receipt id"),
        (("source_receipts:", f"- '{RCPT} '"), "is not a receipt id"),
        (("source_receipts:", "- https://x.example/a"), "is not a receipt id"),
        ((f"source_receipts: {RCPT}",), "must be a list of receipt ids"),
        ((f"source_receipts: [{RCPT}]",), "flow collection"),
        (("source_receipts:",), "no value"),
        (("source_receipts:", "-"), "empty list item"),
        (("source_receipts:", f"- {RCPT}", f"  - {RCPT2}"), "line up"),
        (("source_receipts:", f"- {RCPT} # fetched"), "' #'"),
        (("source_receipts: []", "source_receipts: []"), "twice"),
        (("source_receipts:", f"- &a {RCPT}"), "anchor"),
        (("source_receipts:", "- *a"), "alias"),
        (("source_receipts:", f"- !!str {RCPT}"), "tag"),
        (("source_receipt:", f"- {RCPT}"), "unknown key 'source_receipt'"),
        (("partial_receipts:", "- rcpt_0123"), "partial_receipts entry 'rcpt_0123' is not a"),
        ((f"partial_receipts: {RCPT}",), "partial_receipts must be a list of receipt ids"),
        ((f"partial_receipts: [{RCPT}]",), "flow collection"),
        (("partial_receipts:", f"- {RCPT}"), f"partial_receipts entry {RCPT} is not in source"),
        (
            ("source_receipts:", f"- {RCPT}", "partial_receipts:", f"- {RCPT2}"),
            f"partial_receipts entry {RCPT2} is not in source_receipts",
        ),
    ],
)
def test_malformed_receipt_citations_are_refused(lines: tuple[str, ...], fragment: str) -> None:
    checked = check_frontmatter(front(f"id: {ID}", f"created_at: {WHEN}", *lines), ID)
    assert any(fragment in e for e in checked.errors), checked.errors


def test_a_malformed_receipt_id_is_not_cited_but_the_good_ones_are() -> None:
    checked = check_frontmatter(note_text(ID, receipts=[RCPT, "rcpt_nope"]), ID)
    assert len(checked.errors) == 1 and "'rcpt_nope'" in checked.errors[0]
    assert checked.source_receipts == [RCPT]


# --- properties --------------------------------------------------------------------

_SAFE_TAIL = st.text(
    alphabet=st.characters(
        codec="utf-8",
        exclude_categories=("Cs", "Cc", "Zl", "Zp"),
        exclude_characters="\ufeff\ufffe\uffff\x85",
    ),
    max_size=20,
)


@st.composite
def _plain(draw: st.DrawFn) -> str:
    head = draw(st.sampled_from("abcnxyhABNZ"))
    tail = draw(st.text(alphabet="abz09_-./?=&%~+,;()[]{}!*'\"@`|>#: ", max_size=20))
    value = (head + tail).rstrip(" ")
    if ": " in value or " #" in value or value.endswith(":"):
        # Dropping the colon of "N :" leaves "N ", which reads as "N": strip again.
        value = value.replace(":", "").replace("#", "").rstrip(" ")
    if value.lower() in ("y", "n", "yes", "no", "on", "off", "true", "false", "null"):
        value += "z"
    return value


@st.composite
def _quoted(draw: st.DrawFn) -> str:
    content = draw(_SAFE_TAIL)
    if draw(st.booleans()):
        return "'" + content.replace("\t", " ").replace("'", "''") + "'"
    return '"' + content.replace("\t", " ").replace('"', "").replace("\\", "") + '"'


_timestamp = st.datetimes(min_value=datetime(1970, 1, 1), max_value=datetime(2100, 1, 1)).map(
    lambda d: d.strftime("%Y-%m-%dT%H:%M:%S") + ("Z" if d.second % 2 else ".5+00:00")
)


@st.composite
def valid_frontmatter(draw: st.DrawFn) -> str:
    """Frontmatter built only from the accepted subset (so every example must be accepted)."""
    scalar = st.one_of(_plain(), _quoted(), _timestamp.map(repr))
    entries: list[list[str]] = []
    for key in draw(st.permutations(["id", "created_at", "source_urls", "source_receipts"])):
        if key != "id" and draw(st.booleans()):
            continue
        if key == "created_at":
            entries.append([f"{key}: {draw(st.one_of(scalar, _timestamp))}"])
            continue
        pad = " " * draw(st.integers(1, 3))
        if key in ("source_urls", "source_receipts") and draw(st.booleans()):
            indent = " " * draw(st.integers(0, 3))
            items = draw(st.lists(scalar, min_size=1, max_size=3))
            entries.append([f"{key}:"] + [f"{indent}-{pad}{item}" for item in items])
        else:
            value = draw(st.one_of(scalar, st.just("[]")))
            trailing = " " * draw(st.integers(0, 2))
            entries.append([f"{key}:{pad}{value}{trailing}"])
        if draw(st.booleans()):
            entries.append([draw(st.sampled_from(["", "# note", "  # x: y", "   "]))])
    lines = [line for entry in entries for line in entry]
    newline = draw(st.sampled_from(["\n", "\r\n"]))
    return newline.join(["---", *lines, "---", ""])


@settings(max_examples=400, deadline=None)
@given(valid_frontmatter())
def test_accepted_subset_is_always_accepted_and_read_the_same(text: str) -> None:
    parsed = parse_frontmatter(text)
    assert parsed.errors == [], (text, parsed.errors)
    assert_yaml_reads_the_same(text, parsed)


# Mostly harmless pieces with YAML's tricky characters and typed forms mixed in, so
# that a good share of the generated blocks is accepted and then compared.
_benign = st.sampled_from(["a", "b", "n_ab", "https", "://x", "/a", "-", ".", "_", "1", "é"])
_tricky = st.sampled_from(
    [
        "id",
        "created_at",
        "source_urls",
        "source_receipts",
        "title",
        ":",
        ": ",
        "- ",
        "  ",
        " ",
        "\t",
        "#",
        " #",
        "'",
        "''",
        '"',
        "\\",
        "[]",
        "[",
        "]",
        "{",
        "}",
        "&a",
        "*a",
        "!",
        "!!str",
        "|",
        ">",
        "%",
        "@",
        "`",
        "~",
        "?",
        ",",
        "---",
        "...",
        "\r",
        "\u2028",
        "\x85",
        "\xa0",
        "\ufeff",
        "yes",
        "no",
        "null",
        "true",
        "0",
        "0x1",
        "1e3",
        ".5",
        "-1",
        "1_0",
        "=",
        "<<",
        "2026-07-11",
        "T12:00:00",
        "Z",
        "+00:00",
        WHEN,
        "e\u0301",
        "\U0001f600",
    ]
)
_piece = st.one_of(_benign, _benign, _benign, _tricky)
_prefix = st.sampled_from(
    [
        "id: ",
        "created_at: ",
        "source_urls:",
        "source_urls: ",
        "source_receipts:",
        "- ",
        "  - ",
        "id:",
        "title: ",
        "",
        "# ",
        "  ",
        "-",
        "---",
        "...",
        "id: '",
        'id: "',
        "- '",
        '- "',
    ]
)
_line = st.tuples(_prefix, st.lists(_piece, max_size=6)).map(lambda t: t[0] + "".join(t[1]))


@st.composite
def mutated_frontmatter(draw: st.DrawFn) -> str:
    """Accepted frontmatter with a few tricky pieces inserted anywhere inside the block."""
    text = draw(valid_frontmatter())
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(4, len(text) - 4))
        text = text[:at] + draw(_tricky) + text[at:]
    return text


@settings(max_examples=2000, deadline=None)
@given(
    st.one_of(
        st.lists(_line, max_size=8).map(lambda ls: "\n".join(["---", *ls, "---", ""])),
        mutated_frontmatter(),
    )
)
def test_whatever_the_parser_accepts_yaml_reads_the_same(text: str) -> None:
    parsed = parse_frontmatter(text)
    if parsed.errors:
        return
    assert_yaml_reads_the_same(text, parsed)


def test_without_an_id_from_the_file_name_every_other_rule_is_still_checked() -> None:
    # A record whose name is refused spells no id to compare with, but its
    # frontmatter's other faults still have to be listed in the same round.
    text = front("id: anything", "created_at: yesterday", "title: x")
    errors = check_frontmatter(text, None).errors
    assert not any("must equal" in e for e in errors), errors
    assert any("'title'" in e for e in errors), errors
    assert any("created_at 'yesterday'" in e for e in errors), errors
    assert any(
        "'id' is missing" in e for e in check_frontmatter(front(f"created_at: {WHEN}"), None).errors
    )
