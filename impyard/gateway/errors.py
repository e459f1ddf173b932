"""The gateway's error type: an ``ImpyardError``, so the CLI shows it as one line."""

from __future__ import annotations

from impyard.common.errors import ImpyardError


class GatewayError(ImpyardError):
    """The run's gateway could not be configured, attached or served; the box must not proceed."""
