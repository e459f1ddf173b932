"""Request bodies on their way upstream, held to the allow rule's per-request cap and the
run's upload budget.

A body whose Content-Length is over either limit is refused before the
gateway connects upstream. A chunked body is counted as it streams; the piece
that would pass a limit is never sent, so an upstream sees at most the limit,
and the refusal cuts the upstream connection mid-body.
"""

from __future__ import annotations

from dataclasses import dataclass

from impyard.gateway.budget import RunBudget
from impyard.gateway.outcome import Record, Refused


@dataclass(frozen=True)
class RequestCap:
    """An allow rule's ``request_bytes``: the largest body one request under it may send."""

    rule: str
    limit: int


class UploadMeter:
    """One request body: what it may still send, charged to the run as it goes."""

    def __init__(self, budget: RunBudget, rec: Record, cap: RequestCap | None) -> None:
        self.budget = budget
        self.rec = rec
        self.cap = cap

    def check_declared(self, length: int) -> None:
        """Refuse a body announced larger than a limit allows, before anything is sent."""
        if self.cap is not None and length > self.cap.limit:
            raise self._over_cap(f"request body of {length} bytes is over")
        if length > self.budget.request_bytes_left():
            raise Refused.by_budget(self.budget.upload_refusal())

    def charge(self, count: int) -> None:
        """Count ``count`` bytes about to be sent; refuse (charging nothing) past a limit."""
        sent = self.rec.request_bytes
        if self.cap is not None and sent + count > self.cap.limit:
            raise self._over_cap("request body passed")
        if not self.budget.take_request_bytes(count):
            raise Refused.by_budget(self.budget.upload_refusal())
        self.rec.request_bytes = sent + count

    def _over_cap(self, what: str) -> Refused:
        assert self.cap is not None
        rule = self.cap.rule
        return Refused(413, rule, f"{what} the {self.cap.limit}-byte cap of {rule} (request_bytes)")
