"""Request bodies on their way upstream, held to the allow rule's per-request cap and the
run's upload budget.

A body whose Content-Length is over either limit is refused before the
gateway connects upstream. A chunked body is counted as it streams and cut at
the limit's byte: what fits is sent, nothing past it, and the refusal cuts the
upstream connection mid-body.
"""

from __future__ import annotations

from dataclasses import dataclass

from impyard.gateway.guard.budget import RunBudget
from impyard.gateway.guard.outcome import Record, Refused


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
        self._capped = False

    def check_declared(self, length: int) -> None:
        """Refuse a body announced larger than a limit allows, before anything is sent."""
        if self.cap is not None and length > self.cap.limit:
            raise self._over_cap(f"request body of {length} bytes is over")
        if length > self.budget.request_bytes_left():
            raise Refused.by_budget(self.budget.upload_refusal())

    def charge(self, count: int) -> int:
        """Count ``count`` bytes about to be sent; how many of them may go. Fewer than
        ``count`` means a limit is reached: send those, then raise ``refusal()``."""
        sent = self.rec.request_bytes
        allowed = count if self.cap is None else min(count, max(0, self.cap.limit - sent))
        granted = self.budget.take_request_bytes(allowed)
        self.rec.request_bytes = sent + granted
        self._capped = granted == allowed < count
        return granted

    def refusal(self) -> Refused:
        """Why the last ``charge`` granted less than it was asked."""
        if self._capped:
            return self._over_cap("request body passed")
        return Refused.by_budget(self.budget.upload_refusal())

    def _over_cap(self, what: str) -> Refused:
        assert self.cap is not None
        rule = self.cap.rule
        return Refused(413, rule, f"{what} the {self.cap.limit}-byte cap of {rule} (request_bytes)")
