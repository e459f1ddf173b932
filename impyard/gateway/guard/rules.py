"""Judge one request against the run's ``[gateway]`` policy: first matching rule wins, else deny.

``impyard.policy.gateway.GatewayPolicy`` is the only description of the rules
and has already validated them. What is added here exists only while a
gateway runs: the verdict for a method, host, port and path, the rule name a
refusal and the journal cite, and a route's secret, read on the host when a
request needs it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

from impyard.gateway.errors import GatewayError
from impyard.gateway.guard.address import literal
from impyard.policy.models import GatewayPolicy, GatewayRoute

ROUTE_PREFIX = "/route/"
# Names a box uses for its own loopback; with the gateway's port they mean "the gateway".
LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "::1"})


def normalize_host(host: str) -> str:
    """Lowercase, without brackets or a trailing dot, so requests compare with the policy's
    hosts (stored the same way) like DNS does."""
    host = host.strip().lower()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host.rstrip(".")


@dataclass(frozen=True)
class Decision:
    allowed: bool
    status: int
    rule: str
    reason: str
    route: GatewayRoute | None = None
    path: str = ""  # for routes: the path to request upstream (base path + rest)
    #: May the destination be a loopback or private address: a route the owner marked
    #: ``allow_private``, or an allow rule naming the very IP the request names.
    private_ok: bool = False


@dataclass(frozen=True)
class Endpoint:
    """Where a route's requests go: its upstream URL taken apart once per request."""

    host: str
    port: int
    tls: bool
    base_path: str

    @classmethod
    def of(cls, route: GatewayRoute) -> Endpoint:
        parts = urlsplit(route.upstream)
        tls = parts.scheme == "https"
        host = normalize_host(parts.hostname or "")
        return cls(host, parts.port or (443 if tls else 80), tls, parts.path.rstrip("/"))


def route_rule(route: GatewayRoute) -> str:
    return f"gateway.route {route.name}"


def is_gateway(policy: GatewayPolicy, host: str, port: int) -> bool:
    return normalize_host(host) in LOOPBACK_NAMES and port == policy.port


def decide(policy: GatewayPolicy, method: str, host: str, port: int, path: str) -> Decision:
    """The verdict on one request; a refusal is a 403 naming the rule and why.

    CONNECT is judged by host and port only (TLS is not terminated). A
    request to the gateway itself must be a credential route.
    """
    method = method.upper()
    host = normalize_host(host)
    if is_gateway(policy, host, port):
        if method == "CONNECT":
            # The gateway serves routes as plain HTTP only; a client tunnelling to it
            # has loopback missing from no_proxy (the box gets it set).
            return _deny(
                "gateway.route",
                "CONNECT to the gateway itself is not allowed; call routes as plain "
                f"http://127.0.0.1:{policy.port}/route/<name>/... (keep 127.0.0.1 in no_proxy)",
            )
        return _decide_route(policy, method, path)
    # The policy's own matcher decides, so what deploy checked is exactly what runs.
    index = policy.find_allow(host, port, None if method == "CONNECT" else method)
    if index is not None:
        # A wildcard rule never names an address; a host name is judged once resolved.
        named = policy.allow[index].host == host and literal(host) is not None
        return Decision(True, 200, _allow_rule(policy, index), "allowed", private_ok=named)
    target = f"{host}:{port}"
    near = policy.find_allow(host, port, None)
    if near is not None:
        # A rule grants this endpoint but not the method: name it, it is what to change.
        rule = _allow_rule(policy, near)
        methods = ", ".join(policy.allow[near].methods)
        return _deny(rule, f"{method} to {target} is not allowed by {rule} (methods: {methods})")
    return _deny("default-deny", f"no gateway.allow rule matches {target}")


def request_cap(policy: GatewayPolicy, host: str, port: int, method: str) -> tuple[str, int] | None:
    """The allow rule granting a plain request and its ``request_bytes`` cap on the body, when
    the rule sets one (the same first match ``decide`` names)."""
    index = policy.find_allow(normalize_host(host), port, method.upper())
    if index is None:
        return None
    cap = policy.allow[index].request_bytes
    return None if cap is None else (_allow_rule(policy, index), cap)


def route_header(route: GatewayRoute) -> tuple[str, str]:
    """The header a route adds upstream, with the secret read on the host now: never cached,
    so a rotated secret applies to the next request, and never logged."""
    if route.secret_env is not None:
        secret = os.environ.get(route.secret_env)
        if not secret:
            raise GatewayError(
                f"route {route.name!r}: secret env {route.secret_env} is not set on the host"
            )
    elif route.secret_file is not None:
        try:
            secret = Path(route.secret_file).read_text().strip()
        except OSError as exc:
            raise GatewayError(
                f"route {route.name!r}: secret file {route.secret_file} is unreadable "
                f"({type(exc).__name__})"
            ) from exc
        if not secret:
            raise GatewayError(f"route {route.name!r}: secret file {route.secret_file} is empty")
    else:  # the model requires one source, but model_construct() skips validation: fail closed
        raise GatewayError(f"route {route.name!r} has no secret source")
    if any(ch in secret for ch in "\r\n\0"):
        # A newline would let the secret's content inject headers upstream.
        raise GatewayError(f"route {route.name!r}: secret contains a line break")
    return route.header, route.value.replace("{secret}", secret)


def _decide_route(policy: GatewayPolicy, method: str, path: str) -> Decision:
    if not path.startswith(ROUTE_PREFIX):
        return _deny("gateway.route", f"the gateway only serves {ROUTE_PREFIX}<name>/<path>")
    name, _, rest = path[len(ROUTE_PREFIX) :].partition("/")
    route = next((r for r in policy.route if r.name == name), None)
    if route is None:
        return _deny("gateway.route", f"no gateway.route named {name!r}")
    rule = route_rule(route)
    if any(seg in (".", "..") for seg in unquote(rest).split("/")):
        # The route grants a base path upstream; dot segments could climb out of it.
        return _deny(rule, f"{rule}: dot segments are not allowed in the path")
    if method not in route.methods:
        return _deny(
            rule, f"{method} is not allowed by {rule} (methods: {', '.join(route.methods)})"
        )
    path = f"{Endpoint.of(route).base_path}/{rest}"
    return Decision(True, 200, rule, "allowed", route, path, private_ok=route.allow_private)


def _allow_rule(policy: GatewayPolicy, index: int) -> str:
    return f"gateway.allow[{index}] {policy.allow[index].host}"


def _deny(rule: str, reason: str) -> Decision:
    return Decision(False, 403, rule, reason)
