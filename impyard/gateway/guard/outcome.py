"""What one request leaves behind: its journal record, and the refusal that ends it early."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from impyard.gateway.guard.budget import Refusal
from impyard.gateway.guard.upstream import UpstreamError


@dataclass
class Record:
    """What the journal keeps about one request: never a body, header value or secret."""

    method: str
    #: "https" for a request inside an inspected TLS tunnel.
    scheme: str = "http"
    host: str = ""
    port: int = 0
    path: str = ""
    route: str | None = None
    decision: str = "refused"
    rule: str = ""
    status: int = 0
    bytes: int = 0
    #: Request body bytes relayed upstream.
    request_bytes: int = 0
    #: The fetch receipt of the relayed response, if one was written.
    receipt: str | None = None
    reason: str | None = None
    started: float = field(default_factory=time.monotonic)


class Refused(Exception):
    """Stop serving a request: answered with ``status`` and a one-line reason if nothing has
    been sent yet, else the connection is cut (the only signal left mid-body)."""

    def __init__(self, status: int, rule: str, reason: str, decision: str = "refused") -> None:
        super().__init__(reason)
        self.status = status
        self.rule = rule
        self.reason = reason
        self.decision = decision

    @classmethod
    def by_budget(cls, refusal: Refusal, decision: str = "refused") -> Refused:
        return cls(refusal.status, refusal.rule, refusal.reason, decision)

    @classmethod
    def by_upstream(cls, exc: UpstreamError, rule: str) -> Refused:
        # The address guard is policy (403, final); an unreachable upstream may recover (502).
        named = exc.rule or rule
        if exc.refused:
            return cls(403 if exc.rule is None else 502, named, str(exc))
        return cls(502, named, str(exc), decision="failed")
