"""The governed gateway: a box's only way out, with host, method, credential and budget rules.

Wiring for one run (the pipeline does this; fail closed at every step)::

    rules = GatewayRules.from_dict(effective_policy.gateway.model_dump())
    gateway = Gateway.start(rules, home=home, imp=imp, run_id=run_id, journal=journal)
    env = {**box_env, **gateway.proxy_env()}
    if rules.enabled:
        env[WAIT_FOR_ENV] = BOX_READY_PATH   # box-init waits for the ready file
        # bind-mount <run dir>/signal read-only at BOX_SIGNAL_DIR
    container = create(..., entrypoint=box-init, network_mode="none", environment=env)
    container.start(); container.reload()
    try:
        gateway.attach(container.attrs["State"]["Pid"])   # GatewayError: kill the box, fail the run
        write_ready(signal_dir)
        ... wait for the box ...
    finally:
        gateway.close()   # returns after in-flight requests have written their journal lines
"""

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
