"""Request and byte budgets: per run in memory, per imp per UTC day in a locked file.

The daily counter lives under the home so it holds across runs and host
processes; a crash leaves either the old or the new count, never a torn one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from impyard.common.fsutil import atomic_write_text, locked
from impyard.gateway.errors import GatewayError
from impyard.home import Home
from impyard.policy.models import GatewayBudget


def utc_day() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%d")


@dataclass(frozen=True)
class Refusal:
    rule: str
    reason: str
    status: int = 429


class DailyCounter:
    """``<home>/gateway/<imp>/<YYYY-MM-DD>.count``, incremented under a sibling lock file."""

    def __init__(self, home: Home, imp: str, *, today: Callable[[], str] = utc_day) -> None:
        self.home = home
        self.imp = imp
        self.today = today

    def path(self, day: str | None = None) -> Path:
        return self.home.gateway_day_count(self.imp, day or self.today())

    def read(self, day: str | None = None) -> int:
        return _read_count(self.path(day))

    def take(self, limit: int) -> bool:
        """Count one request if the day's count is below ``limit``; False when it is spent."""
        path = self.path()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with locked(path.with_suffix(".lock")):
                count = _read_count(path)
                if count >= limit:
                    return False
                atomic_write_text(path, f"{count + 1}\n")
                return True
        except OSError as exc:
            # Fail closed: a budget that cannot be counted is not granted.
            raise GatewayError(f"gateway: cannot update daily counter {path}: {exc}") from exc


def _read_count(path: Path) -> int:
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        return 0
    try:
        return int(text)
    except ValueError as exc:
        raise GatewayError(f"gateway: daily counter {path} is corrupt: {text[:40]!r}") from exc


class RunBudget:
    """The budget of one run; thread-safe because every connection runs on its own thread."""

    def __init__(self, limits: GatewayBudget, daily: DailyCounter) -> None:
        self.limits = limits
        self.daily = daily
        self._lock = threading.Lock()
        self.requests = 0
        self.response_bytes = 0
        self.request_bytes = 0

    def admit(self) -> Refusal | None:
        """Count a request about to be forwarded, or say which budget refuses it."""
        limits = self.limits
        with self._lock:
            if self.requests >= limits.requests_per_run:
                return Refusal(
                    "gateway.budget.requests_per_run",
                    f"request budget spent: {limits.requests_per_run} requests per run "
                    "(gateway.budget.requests_per_run)",
                )
            if self.response_bytes >= limits.response_bytes_per_run:
                return self.bytes_refusal()
            # Checked last: the shared daily file is charged only for requests that go out.
            if not self.daily.take(limits.requests_per_imp_per_day):
                return Refusal(
                    "gateway.budget.requests_per_imp_per_day",
                    f"daily request budget spent: {limits.requests_per_imp_per_day} requests "
                    f"per imp per day (gateway.budget.requests_per_imp_per_day)",
                )
            self.requests += 1
            return None

    def take_bytes(self, count: int) -> int:
        """Charge response bytes about to reach the box: all ``count``, or what the run's
        byte budget has left. The caller relays only what was granted, so a body is cut
        at the budget's last byte, and two bodies relayed at once cannot pass it."""
        with self._lock:
            granted = min(count, max(0, self.limits.response_bytes_per_run - self.response_bytes))
            self.response_bytes += granted
            return granted

    def bytes_refusal(self) -> Refusal:
        return Refusal(
            "gateway.budget.response_bytes_per_run",
            f"response byte budget spent: {self.limits.response_bytes_per_run} bytes per run "
            "(gateway.budget.response_bytes_per_run)",
        )

    def request_bytes_left(self) -> int:
        with self._lock:
            return max(0, self.limits.request_bytes_per_run - self.request_bytes)

    def take_request_bytes(self, count: int) -> int:
        """Charge request bytes about to go upstream: all ``count``, or what the run's upload
        budget has left. The caller sends only what was granted, so an upstream sees at most
        the budget, to the byte."""
        with self._lock:
            granted = min(count, max(0, self.limits.request_bytes_per_run - self.request_bytes))
            self.request_bytes += granted
            return granted

    def upload_refusal(self) -> Refusal:
        return Refusal(
            "gateway.budget.request_bytes_per_run",
            f"upload budget spent: {self.limits.request_bytes_per_run} request bytes per run "
            "(gateway.budget.request_bytes_per_run)",
        )
