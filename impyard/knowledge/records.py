"""Record paths: what an appended note's name must look like.

A record lives at ``records/<topic>/<slug>--<namespace>_<number>.md``:

- exactly one topic directory (no nested topics): the note id is then fully
  determined by the file name, and the set of paths that could carry an id is
  small and predictable — which is what lets the lane check duplicate ids in
  O(change) instead of scanning 100,000 records;
- ``topic`` and ``slug`` are lowercase ``[a-z0-9-]`` (non-empty, no leading
  '-'), ``namespace`` is the host-issued ``n_<12 hex>``, ``number`` is decimal
  without leading zeros (``1``, ``2``, ... — so one id has one spelling).

What the frontmatter of a record must hold is checked in ``frontmatter_check`` (parsed
in ``frontmatter``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from impyard.knowledge.frontmatter import Frontmatter, is_utc_timestamp, parse_frontmatter
from impyard.knowledge.frontmatter_check import (
    FrontmatterCheck,
    check_frontmatter,
    frontmatter_errors,
    is_http_url,
)

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


__all__ = [
    "ORGANIZATION",
    "RECORDS",
    "Frontmatter",
    "FrontmatterCheck",
    "RecordName",
    "check_frontmatter",
    "claimed_namespace",
    "frontmatter_errors",
    "is_http_url",
    "is_utc_timestamp",
    "parse_frontmatter",
    "parse_record_path",
]
