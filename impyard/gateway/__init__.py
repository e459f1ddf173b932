"""The governed gateway: a box's only way out, judged by the run's ``[gateway]`` policy.

Modules, one job each, by sub-package (``proxy`` on top; the other three import no
part of the gateway but ``errors``, nor each other):

    proxy/server      Gateway: listener in the box's netns, accept loop, worker threads, journal
    proxy/handler     one client connection: parse, judge (``rules``), forward, tunnel or refuse
    proxy/client      what the request helpers see of the connection and its run's gateway
    proxy/forward     plain HTTP and credential routes: one upstream request, response relayed
    proxy/inspect     CONNECT with inspect_tls: TLS terminated, inner requests judged, forwarded
    proxy/tunnel      CONNECT without inspection: bytes both ways, charged to the byte budget
    proxy/control     the box's own control API (/impyard/check, /impyard/checkpoint)
    proxy/framing     request and response framing (Content-Length, chunked), strictly
    proxy/headers     hop-by-hop headers, and the request heads written upstream
    guard/rules       decide(): the verdict on a request under a GatewayPolicy; route secrets
    guard/address     what a host names, and whether it is public
    guard/upstream    host-side connections; names must resolve to public addresses
    guard/budget      per-run request, byte and upload budgets, the per-imp daily counter
    guard/upload      request bodies held to an allow rule's cap and the run's upload budget
    guard/outcome     a request's journal record, and the refusal that ends it
    provenance/fetch      one relayed response: receipt id, hash and archive copy as it passes
    provenance/digest     SHA-256 of a relayed body, beside the relay once it is large
    provenance/receipts   the receipt model, its URL (secrets redacted), runs/<id>/receipts.jsonl
    provenance/archive    the opt-in source archive: bodies by SHA-256 under <home>/archive
    provenance/archive_intake   one run's bodies into the archive, under its policy's limits
    wiring/boxside    what the box sees: the ready signal, the proxy environment
    wiring/netns      sockets created inside the box's network namespace
    wiring/ca         the data root's inspection CA and the leaf certificates it mints
    wiring/mint       the certificates themselves (``cryptography``, loaded only to mint)
    errors            GatewayError, which every part raises

How ``impyard.runs.drive.run_gateway`` wires a run whose ``policy.gateway.enabled`` (every step
fails closed):

1. ``Gateway.start(policy.gateway, home=, imp=, run_id=, journal=)`` before the box exists.
2. The box spec adds ``gateway.proxy_env()`` and ``WAIT_FOR_ENV=BOX_READY_PATH`` to the
   environment, mounts ``<run dir>/signal`` read-only at ``BOX_SIGNAL_DIR`` and makes
   box-init the entrypoint, so the command waits for the ready file.
3. Once the box runs, ``gateway.attach(pid)`` with its ``State.Pid`` binds the listener in
   its network namespace, then ``write_ready(<run dir>/signal)`` lets box-init start the
   command. A GatewayError fails the run before the command ever starts.
4. ``gateway.close()`` when the run ends, whatever happened; it returns after in-flight
   requests have written their journal lines.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from impyard.gateway.errors import GatewayError
    from impyard.gateway.guard.rules import Decision, decide
    from impyard.gateway.proxy.server import Gateway
    from impyard.gateway.wiring.boxside import (
        BOX_READY_PATH,
        BOX_SIGNAL_DIR,
        READY_FILE,
        WAIT_FOR_ENV,
        write_ready,
    )
    from impyard.gateway.wiring.netns import connect_in_netns, listen_in_netns, run_in_netns

#: Where each name is defined. Loaded on first use, so that importing one light module
#: of the package (``boxside``, ``ca``) does not load the server, its HTTP parsing and
#: TLS: a run builds its box spec before the box exists, and the server's modules load
#: while the engine starts the box.
_WHERE = {
    "BOX_READY_PATH": "wiring.boxside",
    "BOX_SIGNAL_DIR": "wiring.boxside",
    "READY_FILE": "wiring.boxside",
    "WAIT_FOR_ENV": "wiring.boxside",
    "write_ready": "wiring.boxside",
    "GatewayError": "errors",
    "connect_in_netns": "wiring.netns",
    "listen_in_netns": "wiring.netns",
    "run_in_netns": "wiring.netns",
    "Decision": "guard.rules",
    "decide": "guard.rules",
    "Gateway": "proxy.server",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


__all__ = [
    "BOX_READY_PATH",
    "BOX_SIGNAL_DIR",
    "READY_FILE",
    "WAIT_FOR_ENV",
    "Decision",
    "Gateway",
    "GatewayError",
    "connect_in_netns",
    "decide",
    "listen_in_netns",
    "run_in_netns",
    "write_ready",
]
