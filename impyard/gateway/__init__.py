"""The governed gateway: a box's only way out, with host, method, credential and budget rules."""

from __future__ import annotations

from impyard.gateway.errors import GatewayError
from impyard.gateway.netns import connect_in_netns, listen_in_netns, run_in_netns
from impyard.gateway.proxy import (
    BOX_READY_PATH,
    BOX_SIGNAL_DIR,
    READY_FILE,
    WAIT_FOR_ENV,
    Gateway,
    write_ready,
)
from impyard.gateway.rules import AllowRule, Budget, Decision, GatewayRules, Route

__all__ = [
    "BOX_READY_PATH",
    "BOX_SIGNAL_DIR",
    "READY_FILE",
    "WAIT_FOR_ENV",
    "AllowRule",
    "Budget",
    "Decision",
    "Gateway",
    "GatewayError",
    "GatewayRules",
    "Route",
    "connect_in_netns",
    "listen_in_netns",
    "run_in_netns",
    "write_ready",
]
