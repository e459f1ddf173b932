"""Record paths and frontmatter: what an appended note must look like.

A record lives at ``records/<topic>/<slug>--<namespace>_<number>.md``:

- exactly one topic directory (no nested topics): the note id is then fully
  determined by the file name, and the set of paths that could carry an id is
  small and predictable — which is what lets the lane check duplicate ids in
  O(change) instead of scanning 100,000 records;
- ``topic`` and ``slug`` are lowercase ``[a-z0-9-]`` (non-empty, no leading
  '-'), ``namespace`` is the host-issued ``n_<12 hex>``, ``number`` is decimal
  without leading zeros (``1``, ``2``, ... — so one id has one spelling).

The frontmatter is a ``---`` block at the very top holding ``id`` (equal to
``<namespace>_<number>`` of the file name), ``created_at`` (ISO-8601 UTC,
ending in ``Z`` or ``+00:00``) and optionally ``source_urls`` (a list of
http(s) URLs). Only this tiny YAML subset is parsed — ``key: value`` lines and
``- item`` lists — so no YAML library (and none of its tag/anchor surprises)
touches box-written text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from urllib.parse import urlsplit

RECORDS = "records"
ORGANIZATION = "organization"

SEGMENT = r"[a-z0-9][a-z0-9-]*"
NAMESPACE = r"n_[0-9a-f]{12}"
RECORD_PATH = re.compile(
    rf"^records/(?P<topic>{SEGMENT})/(?P<slug>{SEGMENT})--"
    rf"(?P<id>(?P<namespace>{NAMESPACE})_(?P<number>[1-9][0-9]*))\.md$"
)
# Loose shape used to spot a record-like name in another namespace (so the
# message can say "namespace" rather than only "bad name").
LOOSE_RECORD_NAME = re.compile(r"--(?P<namespace>n_[^/]*?)_(?P<number>[0-9]+)\.md$")


@dataclass(frozen=True)
class RecordName:
    topic: str
    slug: str
    namespace: str
    number: int

    @property
    def note_id(self) -> str:
        return f"{self.namespace}_{self.number}"


def parse_record_path(path: str) -> RecordName | None:
    match = RECORD_PATH.fullmatch(path)
    if match is None:
        return None
    return RecordName(
        topic=match["topic"],
        slug=match["slug"],
        namespace=match["namespace"],
        number=int(match["number"]),
    )


def claimed_namespace(path: str) -> str | None:
    """The namespace a record-like file name claims, even when the name is otherwise invalid."""
    match = LOOSE_RECORD_NAME.search(path)
    return match["namespace"] if match else None


@dataclass
class Frontmatter:
    fields: dict[str, str | list[str]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)


def parse_frontmatter(text: str) -> Frontmatter:
    """Parse the leading ``---`` block; every problem is collected, nothing raises."""
    result = Frontmatter()
    lines = text.split("\n")
    if not lines or lines[0].rstrip("\r") != "---":
        result.errors.append("the file must start with a '---' frontmatter line")
        return result
    end = None
    for index in range(1, len(lines)):
        if lines[index].rstrip("\r") == "---":
            end = index
            break
    if end is None:
        result.errors.append("the frontmatter block is not closed by a '---' line")
        return result
    current_list: list[str] | None = None
    for raw in lines[1:end]:
        line = raw.rstrip("\r")
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if line.lstrip().startswith("- "):
            if current_list is None:
                result.errors.append(f"list item outside a list: {line.strip()!r}")
            else:
                current_list.append(_unquote(line.lstrip()[2:].strip()))
            continue
        key, sep, value = line.partition(":")
        key = key.strip()
        if not sep or not re.fullmatch(r"[a-z_][a-z0-9_]*", key) or line[0].isspace():
            result.errors.append(f"unreadable frontmatter line: {line.strip()!r}")
            current_list = None
            continue
        if key in result.fields:
            result.errors.append(f"frontmatter key {key!r} appears twice")
        value = value.strip()
        if value == "":
            current_list = []
            result.fields[key] = current_list
        elif value == "[]":
            current_list = None
            result.fields[key] = []
        else:
            current_list = None
            result.fields[key] = _unquote(value)
    return result


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return value


def is_utc_timestamp(value: str) -> bool:
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|\+00:00)", value):
        return False
    try:
        datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return False
    return True


def is_http_url(value: str) -> bool:
    try:
        parts = urlsplit(value)
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.netloc) and " " not in value


def frontmatter_errors(text: str, expected_id: str) -> tuple[list[str], bool]:
    """Problems with a record's frontmatter, and whether its id tries to escape a path."""
    front = parse_frontmatter(text)
    errors = list(front.errors)
    escape = False
    if front.errors and not front.fields:
        return errors, escape
    note_id = front.fields.get("id")
    if not isinstance(note_id, str) or not note_id:
        errors.append("frontmatter 'id' is missing")
    else:
        if "/" in note_id or "\\" in note_id or ".." in note_id:
            escape = True
        if note_id != expected_id:
            errors.append(
                f"frontmatter id {note_id!r} must equal the file name's id {expected_id!r}"
            )
    created = front.fields.get("created_at")
    if not isinstance(created, str) or not created:
        errors.append("frontmatter 'created_at' is missing")
    elif not is_utc_timestamp(created):
        errors.append(f"created_at {created!r} is not an ISO-8601 UTC timestamp")
    if "source_urls" in front.fields:
        urls = front.fields["source_urls"]
        if not isinstance(urls, list):
            errors.append("source_urls must be a list of http(s) URLs")
        else:
            errors.extend(
                f"source_urls entry {u!r} is not an http(s) URL" for u in urls if not is_http_url(u)
            )
    return errors, escape
