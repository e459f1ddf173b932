"""Identifiers the host issues or accepts: imp names, run ids, record namespaces."""

from __future__ import annotations

import re
import secrets
from datetime import UTC, datetime

from impyard.errors import UsageError

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


def new_run_id() -> str:
    """Time-ordered (so listings sort) and collision-resistant (40 random bits)."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    return f"run-{stamp}-{secrets.token_hex(5)}"


def new_namespace() -> str:
    return f"n_{secrets.token_hex(6)}"


def utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
