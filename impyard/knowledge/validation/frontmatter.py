"""Record frontmatter: a safe YAML subset, parsed here.

The frontmatter is a ``---`` block at the very top holding ``id`` (equal to
``<namespace>_<number>`` of the file name), ``created_at`` (ISO-8601 UTC,
ending in ``Z`` or ``+00:00``) and optionally ``source_urls`` (a list of
http(s) URLs), ``source_receipts`` (a list of the fetch receipt ids the gateway
gave the box, ``rcpt_`` and 20 lowercase hex digits) and ``partial_receipts``
(the cited receipts the note marks as partial sources: fetches cut short), and
no other key. It must be a YAML block mapping in a safe subset — ``key: value``
lines and ``- item`` lists of single-line plain or quoted scalars — parsed here,
so no YAML library (and none of its tag/anchor/alias expansion) touches
box-written text. Whatever the subset accepts, any YAML reader reads as the
same keys and text; anything a reader could read differently is refused, never
guessed at.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime

from impyard.common.textcap import marker

KNOWN_KEYS: tuple[str, ...] = (
    "id",
    "created_at",
    "source_urls",
    "source_receipts",
    "partial_receipts",
)
#: Keys whose value is a list: a block list of items, or ``[]`` for none.
LIST_KEYS: tuple[str, ...] = ("source_urls", "source_receipts", "partial_receipts")

# Unquoted words YAML 1.1 readers (PyYAML among them) turn into booleans or null;
# YAML 1.2 keeps fewer, so refusing the 1.1 set covers both.
_NON_TEXT_WORDS = frozenset({"y", "n", "yes", "no", "on", "off", "true", "false", "null"})
_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
# Characters some YAML reader treats as a line break, or refuses, or silently drops.
_BAD_CHARACTER = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\ufeff\ufffe\uffff\ud800-\udfff]")
# Refused outright: each makes a YAML reader build or look up something other than this text.
_NODE_INDICATORS: dict[str, str] = {
    "&": "a YAML anchor",
    "*": "a YAML alias",
    "!": "a YAML tag",
    "|": "a YAML block scalar",
    ">": "a YAML block scalar",
}
_UTC_TIMESTAMP = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]+)?(?:Z|\+00:00)"
)


@dataclass
class Frontmatter:
    fields: dict[str, str | list[str]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    # The text of refused scalar values, so an id that tries to escape is still named so.
    refused: dict[str, str] = field(default_factory=dict)
    # Known keys that appear, even when their value was refused (so they are not "missing").
    seen: set[str] = field(default_factory=set)
    # False when there is no closed, non-empty block: nothing else is worth checking.
    complete: bool = True


def _show(value: str) -> str:
    """A value or key the box wrote, quoted; past 80 characters its start and how much
    more there was."""
    return repr(value) if len(value) <= 80 else repr(value[:60]) + marker(len(value) - 60)


def _character_problem(line: str) -> str | None:
    match = _BAD_CHARACTER.search(line)
    if match is None:
        return None
    ch = match.group()
    if ch == "\t":
        return "contains a tab (YAML refuses tabs in indentation; use spaces)"
    if ch in "\r\x85\u2028\u2029":
        return f"contains a line break ({ch!r}) that YAML readers split the line at"
    if ch == "\ufeff":
        return "contains a byte order mark (U+FEFF)"
    return f"contains a control character ({ch!r})"


def _plain(value: str, key: str, where: str, *, timestamp: bool) -> tuple[str | None, str | None]:
    """An unquoted scalar, accepted only where every YAML reader sees this exact text.

    Starting with an ASCII letter rules out every indicator and every number, date,
    null or special float form of YAML 1.1 and 1.2; the one typed form let through is
    created_at's UTC timestamp, which a typing reader reads as that same instant.
    """
    if timestamp and is_utc_timestamp(value):
        return value, None
    first = value[0]
    if not ("a" <= first.lower() <= "z"):
        if timestamp and first.isdigit():
            return None, f"created_at {_show(value)} is not an ISO-8601 UTC timestamp"
        if first in "-?:,]}#%@`~=<":
            return (
                None,
                f"{where} {_show(value)} starts with the YAML indicator {first!r}; quote it",
            )
        return None, (
            f"{where} {_show(value)} does not start with a letter, so a YAML reader may read it "
            "as a number, date or special value; quote it"
        )
    if ": " in value:
        return None, f"{where} {_show(value)} contains ': ', which YAML reads as a nested key"
    if value.endswith(":"):
        return None, f"{where} {_show(value)} ends with ':', which YAML reads as a nested key"
    if " #" in value:
        return None, f"{where} {_show(value)} contains ' #', which starts a YAML comment"
    if value.lower() in _NON_TEXT_WORDS:
        return None, f"{where} {_show(value)} reads as a YAML boolean or null; quote it"
    return value, None


def _quoted(value: str, where: str) -> tuple[str | None, str | None]:
    """A single-line quoted scalar: '...' (with '' for ') or "..." without escapes."""
    if value[0] == '"':
        close = value.find('"', 1)
        content = value[1:close]
        if close != -1 and "\\" in content:
            return None, f"{where} {_show(value)} uses a backslash escape; write the text as is"
    else:
        parts: list[str] = []
        start = 1
        while True:
            close = value.find("'", start)
            if close == -1 or value[close + 1 : close + 2] != "'":
                break
            parts.append(value[start : close + 1])
            start = close + 2
        content = "".join(parts) + value[start:close]
    if close == -1:
        return None, f"{where} {_show(value)}: the quote is not closed on its line"
    if value[close + 1 :]:
        return None, f"{where} {_show(value)} has text after the closing quote"
    return content, None


def _value(value: str, key: str, where: str, *, list_allowed: bool) -> tuple[object, str | None]:
    """A key's value (``list_allowed``) or a list item."""
    first = value[0]
    if value == "[]" and list_allowed:
        return [], None
    if first in "'\"":
        return _quoted(value, where)
    if first in "[{":
        allowed = " (only '[]' is allowed, as in 'source_urls: []')" if list_allowed else ""
        return None, f"{where} {_show(value)} is a YAML flow collection{allowed}"
    if first in _NODE_INDICATORS:
        return None, f"{where} {_show(value)} starts with {first!r}: {_NODE_INDICATORS[first]}"
    return _plain(value, key, where, timestamp=list_allowed and key == "created_at")


class _BlockParser:
    """One pass over the lines of a block mapping of scalars and block lists of scalars."""

    def __init__(self, result: Frontmatter) -> None:
        self.result = result
        self.list_key: str | None = None  # key whose block list is open
        self.list_items: list[str] | None = None  # None: the key is refused, items ignored
        self.list_indent: int | None = None
        self.list_line = 0
        self.list_count = 0
        self.list_ok = True

    def error(self, number: int, message: str) -> None:
        self.result.errors.append(f"frontmatter line {number}: {message}")

    def line(self, number: int, line: str) -> None:
        problem = _character_problem(line)
        if problem is not None:
            if (key := line.partition(":")[0]) in KNOWN_KEYS:
                self.result.seen.add(key)  # refused, not missing
            self.error(number, problem)
            return
        stripped = line.lstrip(" ")
        if not stripped or stripped.startswith("#"):
            return
        if stripped == "-" or stripped.startswith("- "):
            self.item(number, line, stripped)
        elif stripped != line:
            self.close()
            self.error(
                number,
                f"indented line {_show(line)} continues the value above (YAML folds it in); "
                "write each value on one line",
            )
        elif line.startswith(("---", "...")):
            self.close()
            self.error(number, f"{_show(line)} is a YAML document marker inside the frontmatter")
        else:
            self.close()
            self.key_line(number, line)

    def item(self, number: int, line: str, stripped: str) -> None:
        key = self.list_key
        if key is None:
            self.error(number, f"list item outside a list: {_show(line)}")
            return
        indent = len(line) - len(stripped)
        if self.list_indent is None:
            self.list_indent = indent
        elif indent != self.list_indent:
            self.list_ok = False
            self.error(number, f"items of {_show(key)} must line up (same indentation)")
            return
        self.list_count += 1
        if self.list_items is None:
            return
        raw = stripped[1:].strip(" ")
        if not raw:
            self.list_ok = False
            self.error(number, f"empty list item in {_show(key)} (YAML reads it as null)")
            return
        value, problem = _value(raw, key, f"{_show(key)} item", list_allowed=False)
        if problem is not None:
            self.list_ok = False
            self.error(number, problem)
        elif isinstance(value, str):
            self.list_items.append(value)

    def key_line(self, number: int, line: str) -> None:
        key, sep, rest = line.partition(":")
        if not sep or not _KEY.fullmatch(key):
            self.error(number, f"unreadable line {_show(line)}: expected 'key: value'")
            return
        known = key in KNOWN_KEYS
        if rest and rest[0] != " ":
            if known:
                self.result.seen.add(key)
            self.error(
                number,
                f"{_show(line)}: put a space after ':' (YAML reads the whole line as one "
                f"text, not the key {_show(key)})",
            )
            return
        refused = False
        if not known:
            refused = True
            self.error(
                number,
                f"unknown key {_show(key)}: extra keys are forbidden "
                f"(only {', '.join(KNOWN_KEYS)})",
            )
        elif key in self.result.seen:
            refused = True
            self.error(number, f"key {key!r} appears twice")
        if known:
            self.result.seen.add(key)
        value = rest.strip(" ")
        if not value:
            self.list_key, self.list_line = key, number
            self.list_items = None if refused else []
            self.list_indent, self.list_count, self.list_ok = None, 0, True
            return
        if refused:
            return
        parsed, problem = _value(value, key, f"{key!r} value", list_allowed=True)
        if problem is not None:
            self.result.refused[key] = value
            self.error(number, problem)
        elif isinstance(parsed, (str, list)):
            self.result.fields[key] = parsed

    def close(self) -> None:
        key, items = self.list_key, self.list_items
        self.list_key = self.list_items = None
        if key is None or items is None:
            return
        if self.list_count == 0:
            self.error(
                self.list_line,
                f"{key!r} has no value (YAML reads it as null); give a value, or [] for no items",
            )
        elif self.list_ok:
            self.result.fields[key] = items


def parse_frontmatter(text: str) -> Frontmatter:
    """Parse the leading ``---`` block; every problem is collected, nothing raises.

    The block must be a plain YAML block mapping of the known keys, whose values are
    single-line plain or quoted scalars or block lists of them. Anything a YAML reader
    could read differently (anchors, aliases, tags, flow collections, block scalars,
    folded continuation lines, comments after values, typed plain values, other line
    breaks) is refused rather than interpreted, so what lands means the same to every
    reader and nothing can make the parser expand anything.
    """
    result = Frontmatter()
    lines = text.split("\n")
    if lines[0].removesuffix("\r") != "---":
        result.errors.append("the file must start with a '---' frontmatter line")
        result.complete = False
        return result
    end = next((i for i in range(1, len(lines)) if lines[i].removesuffix("\r") == "---"), None)
    if end is None:
        result.errors.append("the frontmatter block is not closed by a '---' line")
        result.complete = False
        return result
    parser = _BlockParser(result)
    for number, raw in enumerate(lines[1:end], start=2):
        parser.line(number, raw.removesuffix("\r"))
    parser.close()
    if not result.seen and not result.errors:
        result.errors.append("the frontmatter block has no keys")
        result.complete = False
    return result


def is_utc_timestamp(value: str) -> bool:
    if not _UTC_TIMESTAMP.fullmatch(value):
        return False
    try:
        datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return False
    return True


#: A value as messages quote it (repr, cut at 80 characters).
show_value = _show
