"""What would make every run of an imp fail, found before a box starts.

A gateway route whose secret is missing on the host answers 502 to every request (an
agent then retries and exits 1, the cause only in the run's log); an upstream ending in
``/v1`` behind an OpenAI-style client becomes ``…/v1/v1/chat/completions``; an upstream
whose host is a loopback or private address (however spelled), or a name resolving only
to such addresses, is refused on every request unless the route says
``allow_private = true``. ``deploy`` and ``status`` warn of these; ``run`` and ``serve``
refuse the imps they would fail (``run_refusal``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from impyard.errors import ImpyardError
from impyard.gateway.address import AddressError, lookup
from impyard.home import Home
from impyard.knowledge.imps import list_imps, read_imp_settings
from impyard.policy.compile import policy_for_run
from impyard.policy.gateway import GatewayPolicy, GatewayRoute

#: Clients that add ``/v1`` to the base URL they are given (Pi's models.json does).
V1_AGENTS = frozenset({"pi"})


@dataclass(frozen=True)
class Finding:
    route: str
    code: str  # secret-missing, upstream-v1, upstream-private
    message: str

    def as_dict(self) -> dict[str, str]:
        return {"route": self.route, "code": self.code, "message": self.message}


def route_findings(
    route: GatewayRoute, environ: Mapping[str, str] | None = None, *, agent: str | None = None
) -> list[Finding]:
    """Every reason ``route`` would fail each request, for an imp running ``agent``."""
    env = os.environ if environ is None else environ
    found: list[Finding] = []
    where = f"route {route.name!r}"
    if route.secret_env is not None and not env.get(route.secret_env):
        found.append(
            Finding(
                route.name,
                "secret-missing",
                f"{where}: {route.secret_env} is not set on the host (the gateway adds it to "
                "every request of this route)",
            )
        )
    elif route.secret_file is not None and not _readable(Path(route.secret_file)):
        found.append(
            Finding(
                route.name,
                "secret-missing",
                f"{where}: secret file {route.secret_file} is missing, unreadable or empty",
            )
        )
    parts = urlsplit(route.upstream)
    if parts.path.rstrip("/").endswith("/v1") and (agent is None or agent in V1_AGENTS):
        found.append(
            Finding(
                route.name,
                "upstream-v1",
                f"{where}: upstream {route.upstream} ends in /v1 and OpenAI-style clients (Pi) "
                "add /v1 themselves (…/v1/v1/chat/completions): drop /v1 from the upstream",
            )
        )
    private = private_upstream(parts.hostname or "")
    if private is not None and not route.allow_private:
        found.append(
            Finding(
                route.name,
                "upstream-private",
                f"{where}: upstream host {private}: set allow_private = true on the route "
                "to allow it",
            )
        )
    return found


def policy_findings(
    gateway: GatewayPolicy, environ: Mapping[str, str] | None = None, *, agent: str | None = None
) -> list[Finding]:
    if not gateway.enabled:
        return []
    return [f for route in gateway.route for f in route_findings(route, environ, agent=agent)]


def run_refusal(
    imp: str, gateway: GatewayPolicy, agent: str | None, environ: Mapping[str, str] | None = None
) -> str | None:
    """One line saying why every run of ``imp`` would fail, or None."""
    found = policy_findings(gateway, environ, agent=agent)
    # An upstream ending in /v1 is only certain to fail for a client known to add /v1.
    found = [f for f in found if f.code != "upstream-v1" or agent in V1_AGENTS]
    if not found:
        return None
    return f"refusing to run imp {imp!r}: " + "; ".join(f.message for f in found)


def imps_refused(home: Home) -> list[str]:
    """One ``run_refusal`` line per imp whose every run would fail: serve says them at
    start, and refuses each such task when its turn comes."""
    found = []
    for imp in list_imps(home):
        try:
            policy, _ = policy_for_run(home, imp, strict=False)
            refusal = run_refusal(imp, policy.gateway, read_imp_settings(home, imp).agent)
        except ImpyardError:
            continue  # an invalid policy is the run's own error, said when it is refused
        if refusal is not None:
            found.append(refusal)
    return found


def private_upstream(host: str) -> str | None:
    """How ``host`` names only loopback or private addresses, judged as the gateway judges
    it (any spelling of an IP, a name as it resolves), or None: the gateway refuses such a
    route without ``allow_private``. None too for a name that does not resolve here."""
    if not host:
        return None
    try:
        resolved = lookup(host)
    except AddressError:
        return None
    return resolved.describe() if resolved.private_only else None


def _readable(path: Path) -> bool:
    try:
        return bool(path.read_text().strip())
    except (OSError, UnicodeDecodeError):
        return False
