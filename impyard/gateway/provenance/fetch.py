"""One relayed response on its way to the box, and the fetch receipt it leaves.

The receipt id exists before the response's headers go out (the box gets it
as ``X-Impyard-Receipt``). The body is hashed, counted and, when the archive
is on, stored as it passes, a piece at a time. The receipt line is written
once the body has passed or been cut.
"""

from __future__ import annotations

import logging

from impyard.common.names import utc_now
from impyard.gateway.provenance.archive_intake import ArchivedBody, RunArchive
from impyard.gateway.provenance.digest import BodyDigest
from impyard.gateway.provenance.receipts import Receipt, ReceiptLog, new_receipt_id

log = logging.getLogger(__name__)

_MAX_CONTENT_TYPE = 200


class Fetch:
    def __init__(
        self,
        receipts: ReceiptLog,
        *,
        run: str,
        method: str,
        url: str,
        route: str | None,
        archive: RunArchive | None,
    ) -> None:
        self.id = new_receipt_id()
        self.started_at = utc_now()
        self.receipts = receipts
        self.run = run
        self.method = method
        self.url = url
        self.route = route
        self.archive = archive
        self.status = 0
        self.content_type: str | None = None
        self.bytes = 0
        self._digest = BodyDigest()
        self._body: ArchivedBody | None = None

    def begin(self, status: int, content_type: str | None, length: int | None, body: bool) -> None:
        """The response's head is going out; ``length`` is its Content-Length, if any."""
        self.status = status
        if content_type is not None:
            self.content_type = "".join(ch for ch in content_type if ch.isprintable())[
                :_MAX_CONTENT_TYPE
            ]
        if body and self.archive is not None:
            self._body = self.archive.body(length)

    def add(self, piece: bytes) -> None:
        """A piece of the body, exactly as relayed."""
        self._digest.update(piece)
        self.bytes += len(piece)
        if self._body is not None:
            self._body.write(piece)

    def finish(self, complete: bool) -> str | None:
        """Write the receipt; its id, or None if it could not be written."""
        sha256 = self._digest.hexdigest()
        archived: bool | None = None
        note: str | None = None
        if self.archive is not None:
            if self._body is None:
                archived, note = False, "no body"
            else:
                stored = self._body.finish(sha256, complete)
                archived, note = stored.archived, stored.note
        receipt = Receipt(
            id=self.id,
            run=self.run,
            method=self.method,
            url=self.url,
            route=self.route,
            status=self.status,
            content_type=self.content_type,
            bytes=self.bytes,
            sha256=sha256,
            complete=complete,
            started_at=self.started_at,
            ended_at=utc_now(),
            archived=archived,
            archive_note=note,
        )
        try:
            self.receipts.write(receipt)
        except OSError:
            # The body is already relayed; a lost receipt is logged, not a dropped connection.
            log.exception("gateway %s: receipt %s not written", self.run, self.id)
            return None
        return self.id
