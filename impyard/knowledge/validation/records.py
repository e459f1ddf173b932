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

from impyard.knowledge.validation.frontmatter import (
    Frontmatter,
    is_utc_timestamp,
    parse_frontmatter,
)
from impyard.knowledge.validation.frontmatter_check import (
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


@dataclass(frozen=True)
class NameShape:
    """A record path taken apart: what is wrong with each part, and the namespace it claims.

    The namespace itself is not judged here (only the caller knows the run's), so a
    name whose only fault is another namespace has no ``faults``."""

    faults: list[str]
    #: The ``n_...`` namespace the ``--`` suffix spells, whatever its form; None if none.
    namespace: str | None


_SUFFIX = re.compile(r"(?P<namespace>n_.*)_(?P<number>[^_]*)")
_SEGMENT_CHARACTERS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-")


def _segment_faults(part: str, value: str) -> list[str]:
    """Why a topic or slug is not lowercase ``[a-z0-9-]`` starting with a letter or digit."""
    if not value:
        return [f"the {part} is empty"]
    bits: list[str] = []
    if any("A" <= ch <= "Z" for ch in value):
        bits.append("upper case")
    if " " in value:
        bits.append("a space")
    others = sorted(
        {ch for ch in value if ch not in _SEGMENT_CHARACTERS and ch != " " and not "A" <= ch <= "Z"}
    )
    if others:
        bits.append(", ".join(repr(ch) for ch in others))
    if value.startswith("-"):
        bits.append("a leading '-'")
    return [f"the {part} {value!r} has {' and '.join(bits)}"] if bits else []


def _suffix_faults(suffix: str) -> tuple[list[str], str | None]:
    """Why the part after ``--`` is not ``<namespace>_<number>``, and the namespace it claims."""
    match = _SUFFIX.fullmatch(suffix)
    if match is None:
        return [f"the suffix {suffix!r} after '--' is not the namespace and a number"], None
    number = match["number"]
    if not number.isascii() or not number.isdigit():
        return [f"the number {number!r} after the namespace is not decimal digits"], match[
            "namespace"
        ]
    namespace = match["namespace"]
    if int(number) == 0:
        return [f"the number {number!r} is not 1 or more"], namespace
    if number.startswith("0"):
        return [f"the number {number!r} starts with 0 (write {int(number)})"], namespace
    return [], namespace


def record_name_shape(path: str) -> NameShape:
    """Each part of a ``records/`` path that breaks the record-name rule, said plainly.

    A name is judged part by part (topic directory, slug, namespace suffix, extension)
    so the author learns everything a rename has to fix, not just that it is wrong."""
    parts = path.split("/")[1:]
    faults: list[str] = []
    if len(parts) == 1:
        faults.append("it is directly under records/, not in a topic directory")
    elif len(parts) > 2:
        faults.append(f"it is {len(parts) - 1} directories deep; use exactly one topic directory")
    if len(parts) > 1:
        faults.extend(_segment_faults("topic", parts[0]))
    filename = parts[-1]
    extension: list[str] = []  # said last, in the order the parts appear in the path
    if filename.endswith(".md"):
        stem = filename[: -len(".md")]
    elif filename.lower().endswith(".md"):
        stem = filename[: -len(".md")]
        extension.append(f"the extension {filename[-3:]!r} is not lowercase '.md'")
    elif "." in filename.lstrip("."):
        stem, other = filename.rsplit(".", 1)
        extension.append(f"the extension '.{other}' is not '.md'")
    else:
        stem = filename
        extension.append("the file name has no '.md' extension")
    if "--" not in stem:
        faults.extend(_segment_faults("slug", stem))
        faults.append(
            "the file name has no namespace suffix ('--' then the namespace and a number)"
        )
        return NameShape(faults + extension, None)
    slug, suffix = stem.rsplit("--", 1)
    faults.extend(_segment_faults("slug", slug))
    suffix_faults, namespace = _suffix_faults(suffix)
    return NameShape(faults + suffix_faults + extension, namespace)


__all__ = [
    "ORGANIZATION",
    "RECORDS",
    "Frontmatter",
    "FrontmatterCheck",
    "NameShape",
    "RecordName",
    "check_frontmatter",
    "claimed_namespace",
    "frontmatter_errors",
    "is_http_url",
    "is_utc_timestamp",
    "parse_frontmatter",
    "parse_record_path",
    "record_name_shape",
]
