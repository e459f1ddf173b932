"""Identifiers the host issues or accepts: imp names, run ids, record namespaces."""

from __future__ import annotations

import re
import secrets
from datetime import UTC, datetime

from impyard.common.errors import UsageError

IMP_NAME = re.compile(r"^[a-z][a-z0-9-]{0,31}$")
RUN_ID = re.compile(r"^run-\d{8}T\d{6}Z-[0-9a-f]{10}$")
NAMESPACE = re.compile(r"^n_[0-9a-f]{12}$")


def check_imp_name(name: str) -> str:
    if not IMP_NAME.fullmatch(name):
        raise UsageError(
            f"invalid imp name {name!r}: use 1-32 characters, a lowercase letter first, "
            "then lowercase letters, digits or '-'"
        )
    return name


def check_run_id(run_id: str) -> str:
    if not RUN_ID.fullmatch(run_id):
        raise UsageError(f"invalid run id {run_id!r}")
    return run_id


MAX_CHANNEL_CHARS = 200


def check_channel(channel: str | None) -> str | None:
    """A channel becomes a commit trailer and a memory label: one clean line, bounded.

    Checked when a task is admitted, so nothing that would be refused at commit time
    ever reaches a box (a refused trailer would strand the run after the box ran)."""
    if channel is None:
        return None
    if not channel or channel != channel.strip():
        raise UsageError(f"channel {channel!r} is empty or has leading/trailing whitespace")
    if len(channel) > MAX_CHANNEL_CHARS:
        raise UsageError(
            f"channel {channel[:40]!r}... is longer than {MAX_CHANNEL_CHARS} characters"
        )
    if any(ord(ch) < 0x20 or 0x7F <= ord(ch) < 0xA0 or ch in "\u2028\u2029" for ch in channel):
        raise UsageError(f"channel {channel!r} contains control characters or line breaks")
    return channel


def new_run_id() -> str:
    """Time-ordered (so listings sort) and collision-resistant (40 random bits)."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    return f"run-{stamp}-{secrets.token_hex(5)}"


def new_namespace() -> str:
    return f"n_{secrets.token_hex(6)}"


def utc_now() -> str:
    return utc_stamp(datetime.now(UTC).timestamp())


def utc_stamp(epoch: float) -> str:
    """``epoch`` written as ``utc_now`` writes the time: fixed width, so stamps sort as text."""
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


_STAMP = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?Z")


def utc_epoch(stamp: str) -> float | None:
    """Seconds since the epoch of a ``utc_now`` or engine timestamp (UTC, 'Z', any
    fraction: the engine writes nanoseconds); None for anything else."""
    match = _STAMP.fullmatch(stamp)
    if match is None:
        return None
    whole = datetime.strptime(match[1], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC).timestamp()
    return whole + (float(f"0.{match[2]}") if match[2] else 0.0)
