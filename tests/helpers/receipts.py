"""Fetch receipts as the gateway writes them, for the tests of notes that cite them."""

from __future__ import annotations

import hashlib

from impyard.gateway.provenance.receipts import Receipt, ReceiptLog, new_receipt_id
from impyard.home import Home
from tests.helpers.repo import RUN

REPORT_URL = "https://example.com/report"


def fetched(
    home: Home,
    url: str = REPORT_URL,
    *,
    run: str = RUN,
    body: bytes = b"<html>report</html>",
    complete: bool = True,
    content_type: str = "text/html",
) -> Receipt:
    """A receipt of a GET answered 200, as the gateway writes it, appended to ``run``'s
    receipt log; ``complete`` False for a body cut short (``body`` is then what passed)."""
    receipt = Receipt(
        id=new_receipt_id(),
        run=run,
        method="GET",
        url=url,
        status=200,
        content_type=content_type,
        bytes=len(body),
        sha256=hashlib.sha256(body).hexdigest(),
        complete=complete,
        started_at="2026-07-11T12:00:00.000000Z",
        ended_at="2026-07-11T12:00:00.250000Z",
    )
    home.run_dir(run).mkdir(parents=True, exist_ok=True)
    ReceiptLog(home.run_receipts(run)).write(receipt)
    return receipt
