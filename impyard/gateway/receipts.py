"""Fetch receipts: what the gateway relayed to a box, written by the host.

One JSON line per relayed response in ``runs/<run-id>/receipts.jsonl``: the
receipt id (also sent to the box as ``X-Impyard-Receipt``), method, URL (no
credentials; query values policy names secret are redacted), status, content
type, byte count and SHA-256 of the body as the upstream sent it (transfer
coding removed, content coding such as gzip kept), and when it started and
ended. Never a body, a header value or a secret.
"""

from __future__ import annotations

import json
import secrets
import threading
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from impyard.fsutil import append_line_durably, read_jsonl

RECEIPT_HEADER = "X-Impyard-Receipt"


class Receipt(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    id: str
    run: str
    method: str
    url: str
    status: int
    content_type: str | None = None
    bytes: int
    sha256: str
    started_at: str
    ended_at: str
    #: True when the body is in the source archive; False with ``archive_note`` saying why
    #: not; None when the archive is off.
    archived: bool | None = None
    archive_note: str | None = None


def new_receipt_id() -> str:
    """Unguessable, so a note cannot cite a receipt it was never given."""
    return f"rcpt_{secrets.token_hex(10)}"


class ReceiptLog:
    """Appends one run's receipts (threads of one gateway share it)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()

    def write(self, receipt: Receipt) -> None:
        line = json.dumps(receipt.model_dump(mode="json"), sort_keys=True)
        with self._lock:
            append_line_durably(self.path, line)


def read_receipts(path: Path) -> dict[str, Receipt]:
    """A run's receipts by id (a torn last line from a crash is skipped)."""
    entries, _bad = read_jsonl(path)
    found: dict[str, Receipt] = {}
    for entry in entries:
        try:
            receipt = Receipt.model_validate(entry)
        except ValueError:
            continue
        found[receipt.id] = receipt
    return found
