"""Notes that cite fetch receipts: which citations hold, and how a lane commit records them.

A record may list in ``source_receipts`` the ids of receipts the host's gateway
wrote for responses it relayed to the box. A citation holds only when the
receipt is one of the run's own (the host reads them from the run's directory,
never from the box) and the receipt's URL is, character for character, one of
the note's ``source_urls``: no normalization, so ``https://a.example/x`` and
``https://a.example/x/`` are different sources, as they may well be different
pages. The lane commit that lands the note carries one ``Source-Receipt: <id>
<url> sha256=<hex>`` trailer per receipt its records cite, so ``git log`` alone
tells which bytes a note was based on.

A receipt of a fetch cut short (a spent budget, an upstream that ended early:
``complete`` false) covers only the bytes that passed, so a note may cite it only
as a partial source: listed in ``partial_receipts`` as well. Its trailer then ends
in `` partial``. A complete receipt marked partial is refused too, so what main
says of a source is what its receipt says.

The knowledge core does not read receipts itself: callers pass them in, as
anything with a ``url`` and a ``sha256`` (the gateway's ``Receipt``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from impyard.common.errors import KnowledgeError
from impyard.knowledge.change import Violation

TRAILER = "Source-Receipt"
RULE = "source-receipt"

_SHA256 = re.compile(r"[0-9a-f]{64}")
PARTIAL = "partial"
_LINE = re.compile(
    rf"{TRAILER}: (?P<id>rcpt_[0-9a-f]{{20}}) (?P<url>\S+) sha256=(?P<sha256>[0-9a-f]{{64}})"
    rf"(?: (?P<partial>{PARTIAL}))?"
)


class SourceReceipt(Protocol):
    """What a citation needs of a fetch receipt."""

    @property
    def url(self) -> str: ...

    @property
    def sha256(self) -> str: ...

    @property
    def bytes(self) -> int: ...

    @property
    def complete(self) -> bool: ...


#: A run's receipts by id.
Receipts = Mapping[str, SourceReceipt]


@dataclass(frozen=True, order=True)
class Citation:
    """One receipt a landed note cites, as its trailer records it."""

    receipt: str
    url: str
    sha256: str
    #: The receipt is of a fetch cut short, cited as a partial source.
    partial: bool = False

    def trailer(self) -> str:
        # Validation refuses such receipts first; this guards the commit message itself.
        if not _fits_a_trailer(self.url) or not _SHA256.fullmatch(self.sha256):
            raise KnowledgeError(f"receipt {self.receipt} cannot be written as a trailer")
        line = f"{TRAILER}: {self.receipt} {self.url} sha256={self.sha256}"
        return f"{line} {PARTIAL}" if self.partial else line

    def as_dict(self) -> dict[str, str | bool]:
        return {"id": self.receipt, "url": self.url, "sha256": self.sha256, "partial": self.partial}


def _fits_a_trailer(url: str) -> bool:
    """A trailer is one line and its fields are split at spaces: no whitespace, no controls."""
    return bool(url) and not any(
        ch.isspace() or ord(ch) < 0x20 or 0x7F <= ord(ch) < 0xA0 for ch in url
    )


def cite(
    path: str,
    receipt_ids: Iterable[str],
    source_urls: list[str] | None,
    receipts: Receipts,
    partial_ids: Iterable[str] = (),
) -> tuple[list[Citation], list[Violation]]:
    """The citations of the record at ``path`` that hold, and a violation for each that does
    not (naming the path and the receipt). ``partial_ids`` are the cited receipts the note
    marks as partial sources."""
    citations: list[Citation] = []
    found: list[Violation] = []
    urls = set(source_urls or ())
    partial = set(partial_ids)
    for receipt_id in dict.fromkeys(receipt_ids):
        receipt = receipts.get(receipt_id)
        if receipt is None:
            found.append(
                Violation(path, RULE, f"receipt {receipt_id} is not a receipt of this run")
            )
        elif receipt.url not in urls:
            found.append(
                Violation(
                    path,
                    RULE,
                    f"receipt {receipt_id} is for {receipt.url!r}, which is not in source_urls",
                )
            )
        elif not _fits_a_trailer(receipt.url) or not _SHA256.fullmatch(receipt.sha256):
            found.append(
                Violation(
                    path, RULE, f"receipt {receipt_id} cannot be recorded in a commit trailer"
                )
            )
        elif not receipt.complete and receipt_id not in partial:
            found.append(
                Violation(
                    path,
                    RULE,
                    f"receipt {receipt_id} is of an incomplete fetch (cut short after "
                    f"{receipt.bytes} bytes): list it in partial_receipts to cite it as a "
                    "partial source",
                )
            )
        elif receipt.complete and receipt_id in partial:
            found.append(
                Violation(
                    path,
                    RULE,
                    f"receipt {receipt_id} is of a complete fetch: remove it from partial_receipts",
                )
            )
        else:
            citations.append(
                Citation(receipt_id, receipt.url, receipt.sha256, partial=not receipt.complete)
            )
    return citations, found


def trailer_lines(citations: Iterable[Citation]) -> list[str]:
    """One trailer per receipt, sorted by receipt id."""
    unique = {c.receipt: c for c in citations}
    return [unique[receipt].trailer() for receipt in sorted(unique)]


def parse_trailers(message: str) -> list[Citation]:
    """The ``Source-Receipt`` trailers of a lane commit's message (its last paragraph)."""
    last = message.rstrip("\n").rsplit("\n\n", 1)[-1]
    found: list[Citation] = []
    for line in last.split("\n"):
        match = _LINE.fullmatch(line)
        if match is not None:
            partial = match["partial"] is not None
            found.append(Citation(match["id"], match["url"], match["sha256"], partial))
    return found


__all__ = [
    "PARTIAL",
    "RULE",
    "TRAILER",
    "Citation",
    "Receipts",
    "SourceReceipt",
    "cite",
    "parse_trailers",
    "trailer_lines",
]
