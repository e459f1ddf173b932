"""What would make every run of an imp fail, found before a box starts.

A gateway route whose secret is missing on the host answers 502 to every request (an
agent then retries and exits 1, the cause only in the run's log); an upstream ending in
``/v1`` behind an OpenAI-style client becomes ``…/v1/v1/chat/completions``; an upstream
whose host is a loopback or private address (however spelled), or a name resolving only
to such addresses, is refused on every request unless the route says
``allow_private = true``. ``deploy`` and ``status`` warn of these; ``run`` and ``serve``
refuse the imps they would fail (``run_refusal``): only those whose runs call that route
(``routes_used``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from impyard.box.images.agents import AGENTS, MODEL_ROUTE_ENV
from impyard.common.errors import ImpyardError
from impyard.gateway.guard.address import AddressError, lookup
from impyard.home import Home
from impyard.knowledge.imps import list_imps, read_imp_settings
from impyard.policy.compile import policy_for_run
from impyard.policy.gateway import GatewayPolicy, GatewayRoute


def _adds_v1(agent: str | None) -> bool:
    """Whether ``agent``'s client adds ``/v1`` to the base URL it is given (Pi's
    models.json does); an owner's command may or may not."""
    known = AGENTS.get(agent) if agent is not None else None
    return known is not None and known.adds_v1


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
    if parts.path.rstrip("/").endswith("/v1") and (agent is None or _adds_v1(agent)):
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


def routes_used(agent: str | None, box_env: Mapping[str, str]) -> set[str]:
    """The gateway routes every run of an imp calls, so that a route failing each request
    fails each run.

    An agent sends its model calls to the route its variable in ``[box.env]`` names, else
    to its default (Pi: ``IMPYARD_MODEL_ROUTE``, ``llm``). An owner's command may call any
    route or none: only the route its ``[box.env]`` names in ``IMPYARD_MODEL_ROUTE`` counts
    as used; a request on another route whose secret is missing gets the gateway's 502
    naming the unset secret (journaled), and the run goes on."""
    known = AGENTS.get(agent) if agent is not None else None
    if known is not None:
        return {box_env.get(known.model_route_env) or known.default_model_route}
    named = box_env.get(MODEL_ROUTE_ENV)
    return {named} if named else set()


def run_refusal(
    imp: str,
    gateway: GatewayPolicy,
    agent: str | None,
    box_env: Mapping[str, str],
    environ: Mapping[str, str] | None = None,
) -> str | None:
    """One line saying why every run of ``imp`` would fail, or None. ``agent`` None: the
    imp runs a command (its own or the owner's ``--command``)."""
    if not gateway.enabled:
        return None
    used = routes_used(agent, box_env)
    found = [
        f
        for route in gateway.route
        if route.name in used
        for f in route_findings(route, environ, agent=agent)
    ]
    # An upstream ending in /v1 is only certain to fail for a client known to add /v1.
    found = [f for f in found if f.code != "upstream-v1" or _adds_v1(agent)]
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
            agent = read_imp_settings(home, imp).agent
            refusal = run_refusal(imp, policy.gateway, agent, policy.box.env)
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
