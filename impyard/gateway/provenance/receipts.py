"""Fetch receipts: what the gateway relayed to a box, written by the host.

One JSON line per relayed response in ``runs/<run-id>/receipts.jsonl``: the
receipt id (also sent to the box as ``X-Impyard-Receipt``), method, URL (no
credentials; query values policy names secret are redacted), status, content
type, byte count and SHA-256 of the body as the upstream sent it (transfer
coding removed, content coding such as gzip kept), and when it started and
ended. A body cut short (a spent budget, a failed upstream or client) still
gets its receipt, of the bytes that passed, with ``complete`` false. Never a
body, a header value (but the content type) or a secret.
"""

from __future__ import annotations

import json
import secrets
import threading
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import unquote_plus

from pydantic import BaseModel, ConfigDict

from impyard.common.fsutil import append_line_durably, read_jsonl

RECEIPT_HEADER = "X-Impyard-Receipt"
REDACTED = "REDACTED"
_DEFAULT_PORTS = {"http": 80, "https": 443}


class Receipt(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    id: str
    run: str
    method: str
    url: str
    #: The credential route the request went through, if any.
    route: str | None = None
    status: int
    content_type: str | None = None
    bytes: int
    sha256: str
    #: False when the body was cut short: ``bytes`` and ``sha256`` cover what was relayed.
    complete: bool = True
    started_at: str
    ended_at: str
    #: True when the body is in the source archive; False with ``archive_note`` saying why
    #: not; None when the archive is off.
    archived: bool | None = None
    archive_note: str | None = None


def receipt_url(
    scheme: str, host: str, port: int, target: str, secret_params: Iterable[str]
) -> str:
    """The URL a receipt names: no userinfo (it is built from the host, never the request's
    authority), the port only when not the scheme's default, and the value of every query
    parameter in ``secret_params`` (lowercase names, matched in any case) replaced by
    REDACTED. Everything else stays as the request spelt it."""
    authority = f"[{host}]" if ":" in host else host
    if port != _DEFAULT_PORTS.get(scheme):
        authority += f":{port}"
    path, mark, query = target.partition("?")
    if mark:
        query = _redact_query(query, frozenset(secret_params))
    return f"{scheme}://{authority}{path}{mark}{query}"


def _redact_query(query: str, secret: frozenset[str]) -> str:
    pieces = []
    for piece in query.split("&"):
        name, equals, _value = piece.partition("=")
        if equals and unquote_plus(name).strip().lower() in secret:
            piece = f"{name}={REDACTED}"
        pieces.append(piece)
    return "&".join(pieces)


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
            # The run dir exists for every real run; a gateway serving alone makes it.
            self.path.parent.mkdir(parents=True, exist_ok=True)
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
