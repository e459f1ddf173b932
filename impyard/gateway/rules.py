"""Runtime gateway rules: built once per run from the policy's ``[gateway]`` table.

The policy layer validates and tightens; this module only turns the compiled
TOML-shaped dict into frozen objects and answers one question per request:
may this method reach this host, port and path? Default deny.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from impyard.errors import ConfigError
from impyard.gateway.errors import GatewayError

DEFAULT_PORT = 3128
DEFAULT_ALLOW_PORTS = (80, 443)
DEFAULT_METHODS = ("GET", "HEAD")
ROUTE_PREFIX = "/route/"
# Names a box uses for its own loopback; with the gateway's port they mean "the gateway".
LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "::1"})


def normalize_host(host: str) -> str:
    """Lowercase, without brackets or a trailing dot, so rules compare like DNS does."""
    host = host.strip().lower()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host.rstrip(".")


def is_ip_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class AllowRule:
    index: int
    host: str
    ports: tuple[int, ...] = DEFAULT_ALLOW_PORTS
    methods: tuple[str, ...] = DEFAULT_METHODS

    @property
    def name(self) -> str:
        return f"gateway.allow[{self.index}] {self.host}"

    def matches_host(self, host: str) -> bool:
        if self.host.startswith("*."):
            # "*.example.com" is subdomains only: the apex must be granted by its own rule.
            return host.endswith(self.host[1:]) and len(host) > len(self.host) - 1
        return host == self.host

    def matches_endpoint(self, host: str, port: int) -> bool:
        return port in self.ports and self.matches_host(host)


@dataclass(frozen=True)
class Route:
    """A credential route: the host adds ``header: value`` with a secret only it can read."""

    name: str
    upstream: str
    header: str
    value: str = "{secret}"
    secret_env: str | None = None
    secret_file: str | None = None
    methods: tuple[str, ...] = DEFAULT_METHODS

    @property
    def rule(self) -> str:
        return f"gateway.route {self.name}"

    @property
    def scheme(self) -> str:
        return urlsplit(self.upstream).scheme

    @property
    def host(self) -> str:
        return normalize_host(urlsplit(self.upstream).hostname or "")

    @property
    def port(self) -> int:
        parts = urlsplit(self.upstream)
        return parts.port or (443 if parts.scheme == "https" else 80)

    @property
    def base_path(self) -> str:
        return urlsplit(self.upstream).path.rstrip("/")

    def header_value(self) -> str:
        """The header value, with the secret read on the host now (never cached, never logged)."""
        if self.secret_env is not None:
            secret = os.environ.get(self.secret_env)
            if not secret:
                raise GatewayError(
                    f"route {self.name!r}: secret env {self.secret_env} is not set on the host"
                )
        elif self.secret_file is not None:
            try:
                secret = Path(self.secret_file).read_text().strip()
            except OSError as exc:
                raise GatewayError(
                    f"route {self.name!r}: secret file {self.secret_file} is unreadable "
                    f"({type(exc).__name__})"
                ) from exc
            if not secret:
                raise GatewayError(f"route {self.name!r}: secret file {self.secret_file} is empty")
        else:  # from_dict guarantees one source; kept so a hand-built Route fails closed
            raise GatewayError(f"route {self.name!r} has no secret source")
        if any(ch in secret for ch in "\r\n\0"):
            # A newline would let the secret's content inject headers upstream.
            raise GatewayError(f"route {self.name!r}: secret contains a line break")
        return self.value.replace("{secret}", secret)


@dataclass(frozen=True)
class Budget:
    requests_per_run: int | None = None
    response_bytes_per_run: int | None = None
    requests_per_imp_per_day: int | None = None


@dataclass(frozen=True)
class Decision:
    allowed: bool
    status: int
    rule: str
    reason: str
    route: Route | None = None
    path: str = ""  # for routes: the path to request upstream (base path + rest)


@dataclass(frozen=True)
class GatewayRules:
    enabled: bool = True
    port: int = DEFAULT_PORT
    allow: tuple[AllowRule, ...] = ()
    routes: tuple[Route, ...] = ()
    budget: Budget = field(default_factory=Budget)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GatewayRules:
        """Build from the ``[gateway]`` table (or the policy model's ``model_dump()``)."""
        if not isinstance(data, Mapping):
            raise ConfigError("gateway: expected a table")
        raw_port = data.get("port")
        port = _int(
            DEFAULT_PORT if raw_port is None else raw_port, "gateway.port", low=1, high=65535
        )
        allow = tuple(
            _allow_rule(i, raw) for i, raw in enumerate(_list(data.get("allow"), "gateway.allow"))
        )
        routes = tuple(_route(raw) for raw in _list(data.get("route"), "gateway.route"))
        names = [r.name for r in routes]
        if len(names) != len(set(names)):
            raise ConfigError(f"gateway.route: duplicate route names in {names}")
        raw_budget = data.get("budget") or {}
        if not isinstance(raw_budget, Mapping):
            raise ConfigError("gateway.budget: expected a table")
        budget = Budget(
            **{
                key: _optional_int(raw_budget.get(key), f"gateway.budget.{key}")
                for key in (
                    "requests_per_run",
                    "response_bytes_per_run",
                    "requests_per_imp_per_day",
                )
            }
        )
        return cls(
            enabled=data.get("enabled") is not False,
            port=port,
            allow=allow,
            routes=routes,
            budget=budget,
        )

    def is_gateway(self, host: str, port: int) -> bool:
        return normalize_host(host) in LOOPBACK_NAMES and port == self.port

    def decide(self, method: str, host: str, port: int, path: str) -> Decision:
        """First matching rule wins; no match is a 403 naming why.

        CONNECT is judged by host and port only (TLS is not terminated). A
        request to the gateway itself must be a credential route.
        """
        method = method.upper()
        host = normalize_host(host)
        if self.is_gateway(host, port):
            if method == "CONNECT":
                # The gateway serves routes as plain HTTP only; a client tunnelling to it
                # has loopback missing from no_proxy (the box gets it set).
                return _deny(
                    "gateway.route",
                    "CONNECT to the gateway itself is not allowed; call routes as plain "
                    f"http://127.0.0.1:{self.port}/route/<name>/... (keep 127.0.0.1 in no_proxy)",
                )
            return self._decide_route(method, path)
        near: AllowRule | None = None
        for rule in self.allow:
            if not rule.matches_endpoint(host, port):
                continue
            if method == "CONNECT" or method in rule.methods:
                return Decision(True, 200, rule.name, "allowed")
            near = near or rule
        target = f"{host}:{port}"
        if near is not None:
            return _deny(
                near.name,
                f"{method} to {target} is not allowed by {near.name} "
                f"(methods: {', '.join(near.methods) or 'none'})",
            )
        return _deny("default-deny", f"no gateway.allow rule matches {target}")

    def _decide_route(self, method: str, path: str) -> Decision:
        if not path.startswith(ROUTE_PREFIX):
            return _deny("gateway.route", f"the gateway only serves {ROUTE_PREFIX}<name>/<path>")
        name, _, rest = path[len(ROUTE_PREFIX) :].partition("/")
        route = next((r for r in self.routes if r.name == name), None)
        if route is None:
            return _deny("gateway.route", f"no gateway.route named {name!r}")
        if any(seg in (".", "..") for seg in unquote(rest).split("/")):
            # The route grants a base path upstream; dot segments could climb out of it.
            return _deny(route.rule, f"{route.rule}: dot segments are not allowed in the path")
        if method not in route.methods:
            return _deny(
                route.rule,
                f"{method} is not allowed by {route.rule} (methods: {', '.join(route.methods)})",
            )
        return Decision(True, 200, route.rule, "allowed", route, f"{route.base_path}/{rest}")


def _deny(rule: str, reason: str) -> Decision:
    return Decision(False, 403, rule, reason)


def _list(value: Any, where: str) -> Sequence[Mapping[str, Any]]:
    if value is None:
        return []
    if not isinstance(value, list | tuple) or not all(isinstance(v, Mapping) for v in value):
        raise ConfigError(f"{where}: expected an array of tables")
    return value


def _int(value: Any, where: str, *, low: int = 0, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigError(f"{where}: expected an integer >= {low}, got {value!r}")
    if high is not None and value > high:
        raise ConfigError(f"{where}: expected an integer <= {high}, got {value!r}")
    return value


def _optional_int(value: Any, where: str) -> int | None:
    return None if value is None else _int(value, where)


def _methods(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return DEFAULT_METHODS
    if not isinstance(value, list | tuple) or not all(isinstance(m, str) and m for m in value):
        raise ConfigError(f"{where}: expected a list of HTTP methods")
    return tuple(m.upper() for m in value)


def _allow_rule(index: int, raw: Mapping[str, Any]) -> AllowRule:
    where = f"gateway.allow[{index}]"
    host = raw.get("host")
    if not isinstance(host, str) or not host.strip():
        raise ConfigError(f"{where}.host: expected a host name")
    host = normalize_host(host)
    if "*" in host and (not host.startswith("*.") or "*" in host[1:] or is_ip_literal(host[2:])):
        raise ConfigError(f"{where}.host: a wildcard must be a leading '*.' label, got {host!r}")
    # A pydantic model_dump() writes None for unset optional fields: same as absent.
    ports_raw = raw.get("ports")
    if ports_raw is None:
        ports_raw = list(DEFAULT_ALLOW_PORTS)
    if not isinstance(ports_raw, list | tuple):
        raise ConfigError(f"{where}.ports: expected a list of ports")
    ports = tuple(_int(p, f"{where}.ports", low=1, high=65535) for p in ports_raw)
    return AllowRule(index, host, ports, _methods(raw.get("methods"), f"{where}.methods"))


def _route(raw: Mapping[str, Any]) -> Route:
    name = raw.get("name")
    if not isinstance(name, str) or not name or "/" in name:
        raise ConfigError(f"gateway.route: invalid route name {name!r}")
    where = f"gateway.route {name}"
    upstream = raw.get("upstream")
    parts = urlsplit(upstream) if isinstance(upstream, str) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{where}: upstream must be an http(s) URL, got {upstream!r}")
    if parts.query or parts.fragment or parts.username:
        raise ConfigError(f"{where}: upstream may not carry a query, fragment or user info")
    header = raw.get("header")
    if not isinstance(header, str) or not header or any(c in header for c in ":\r\n "):
        raise ConfigError(f"{where}: invalid header name {header!r}")
    value = raw.get("value")
    if value is None:
        value = "{secret}"
    if not isinstance(value, str) or "{secret}" not in value or any(c in value for c in "\r\n"):
        raise ConfigError(f"{where}: value must be one line containing {{secret}}")
    secret_env, secret_file = raw.get("secret_env"), raw.get("secret_file")
    if (secret_env is None) == (secret_file is None):
        raise ConfigError(f"{where}: set exactly one of secret_env or secret_file")
    for key, val in (("secret_env", secret_env), ("secret_file", secret_file)):
        if val is not None and (not isinstance(val, str) or not val):
            raise ConfigError(f"{where}.{key}: expected a non-empty string")
    return Route(
        name=name,
        upstream=upstream.rstrip("/") if isinstance(upstream, str) else "",
        header=header,
        value=value,
        secret_env=secret_env,
        secret_file=secret_file,
        methods=_methods(raw.get("methods"), f"{where}.methods"),
    )
