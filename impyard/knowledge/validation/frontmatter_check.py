"""What a record's frontmatter says, checked: its id against the file name, its
timestamp, its source URLs and the fetch receipts it cites (and marks partial).

The YAML subset itself is parsed in ``frontmatter``; this module judges the fields.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from impyard.knowledge.validation.frontmatter import (
    Frontmatter,
    is_utc_timestamp,
    parse_frontmatter,
    show_value,
)

RECEIPT_ID = re.compile(r"rcpt_[0-9a-f]{20}")


def is_http_url(value: str) -> bool:
    try:
        parts = urlsplit(value)
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.netloc) and " " not in value


@dataclass(frozen=True)
class FrontmatterCheck:
    """What a record's frontmatter says, and what is wrong with it."""

    errors: list[str]
    #: The id tries to leave its directory ('/', '\\' or '..').
    escape: bool
    #: None when the key is absent or its value was refused.
    source_urls: list[str] | None = None
    #: The well-formed receipt ids cited (malformed ones are errors, not listed).
    source_receipts: list[str] = field(default_factory=list)
    #: The cited receipts marked as partial sources (each also in ``source_receipts``).
    partial_receipts: list[str] = field(default_factory=list)


def check_frontmatter(text: str, expected_id: str | None) -> FrontmatterCheck:
    """A record's frontmatter checked against the id its file name spells.

    ``expected_id`` is None when the file name spells no valid id of this run (that name
    is refused on its own): every other rule is still checked, so one listing shows all
    a fix needs, and the id only has to be present and single."""
    front = parse_frontmatter(text)
    errors = list(front.errors)
    if not front.complete:
        return FrontmatterCheck(errors, escape=False)
    note_id = front.fields.get("id")
    written_id = note_id if isinstance(note_id, str) else front.refused.get("id", "")
    escape = "/" in written_id or "\\" in written_id or ".." in written_id
    if "id" not in front.seen:
        errors.append("frontmatter 'id' is missing")
    elif isinstance(note_id, list):
        errors.append("frontmatter 'id' must be a single value, not a list")
    elif isinstance(note_id, str) and expected_id is not None and note_id != expected_id:
        errors.append(
            f"frontmatter id {show_value(note_id)} must equal the file name's id {expected_id!r}"
        )
    created = front.fields.get("created_at")
    if "created_at" not in front.seen:
        errors.append("frontmatter 'created_at' is missing")
    elif isinstance(created, list):
        errors.append("frontmatter 'created_at' must be a single value, not a list")
    elif isinstance(created, str) and not is_utc_timestamp(created):
        errors.append(f"created_at {show_value(created)} is not an ISO-8601 UTC timestamp")
    urls = front.fields.get("source_urls")
    if isinstance(urls, str):
        errors.append("source_urls must be a list of http(s) URLs")
        urls = None
    elif urls is not None:
        errors.extend(
            f"source_urls entry {show_value(u)} is not an http(s) URL"
            for u in urls
            if not is_http_url(u)
        )
    cited = _receipt_ids(front, "source_receipts", errors)
    partial = _receipt_ids(front, "partial_receipts", errors)
    # A partial citation is a citation first: marking a receipt the note does not cite
    # would say something of a source the note never names.
    errors.extend(
        f"partial_receipts entry {receipt} is not in source_receipts"
        for receipt in partial
        if receipt not in cited
    )
    return FrontmatterCheck(
        errors, escape, source_urls=urls, source_receipts=cited, partial_receipts=partial
    )


def _receipt_ids(front: Frontmatter, key: str, errors: list[str]) -> list[str]:
    """The well-formed receipt ids listed under ``key``; an error for each other item."""
    value = front.fields.get(key)
    if isinstance(value, str):
        errors.append(f"{key} must be a list of receipt ids (rcpt_ and 20 hex digits)")
        return []
    found: list[str] = []
    for receipt in value or ():
        if RECEIPT_ID.fullmatch(receipt):
            found.append(receipt)
        else:
            errors.append(
                f"{key} entry {show_value(receipt)} is not a receipt id "
                "(rcpt_ and 20 lowercase hex digits)"
            )
    return found


def frontmatter_errors(text: str, expected_id: str) -> tuple[list[str], bool]:
    """Problems with a record's frontmatter, and whether its id tries to escape a path."""
    checked = check_frontmatter(text, expected_id)
    return checked.errors, checked.escape
