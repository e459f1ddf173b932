"""The ``[gateway]`` policy: allow rules, credential routes, budgets, receipts and the archive.

These models are also the gateway's runtime rules (``impyard.gateway.guard.rules`` decides
with them), so what deploy validates is exactly what runs.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import AfterValidator, Field, field_validator, model_validator

from impyard.policy.base import (
    DISABLE,
    ENV_NAME,
    FIXED,
    LOWER,
    REQUIRE,
    SUBSET,
    SUPERSET,
    _Strict,
    _unique,
)

# HTTP methods a gateway rule may grant (inside inspected HTTPS too). A CONNECT is allowed by
# a rule's host and port, whatever its methods, so CONNECT is never listed here.
HttpMethod = Literal["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]


def _read_only_methods() -> list[HttpMethod]:
    return ["GET", "HEAD"]


#: Query parameters whose values a receipt replaces with REDACTED: the usual places an API
#: key or signed-URL signature rides in a URL.
DEFAULT_SECRET_QUERY_PARAMS = (
    "access_token",
    "token",
    "key",
    "api_key",
    "apikey",
    "sig",
    "signature",
    "password",
    "secret",
    "client_secret",
)

_LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")
_ROUTE_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
_HEADER_NAME = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+$")
_QUERY_PARAM = re.compile(r"^[^\s&=#]{1,100}$")


def _query_param(value: str) -> str:
    """Lowercase: receipts match names without regard to case, so ``Token`` is redacted too."""
    if not _QUERY_PARAM.fullmatch(value):
        raise ValueError(f"{value!r} is not a query parameter name (no spaces, '&', '=' or '#')")
    return value.lower()


QueryParamName = Annotated[str, AfterValidator(_query_param)]


def _is_hostname(name: str) -> bool:
    if len(name) > 253:
        return False
    return all(_LABEL.match(label) for label in name.split("."))


def _check_host(value: str) -> str:
    """Lowercase, no trailing dot, IPv6 without brackets: rules compare the way DNS does."""
    host = value.lower().rstrip(".")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if host.startswith("*."):
        if _is_hostname(host[2:]) and not _is_ip(host[2:]):
            return host
        raise ValueError(f"{value!r} is not '*.' followed by a host name")
    if _is_ip(host) or _is_hostname(host):
        return host
    raise ValueError(f"{value!r} is not an exact host name, IP address or '*.suffix'")


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def host_covers(pattern: str, host: str) -> bool:
    """Does allow-rule host ``pattern`` match ``host`` (itself a host or a ``*.`` pattern)?

    ``*.example.com`` matches every subdomain of example.com but not example.com itself.
    """
    if pattern == host:
        return True
    if not pattern.startswith("*."):
        return False
    suffix = pattern[1:]  # ".example.com"
    return host.endswith(suffix) and len(host) > len(suffix)


class GatewayAllow(_Strict):
    """One grant: requests to ``host`` on one of ``ports`` with one of ``methods``.

    A request is allowed when some rule matches its host, port and (for plain HTTP) method;
    rules are a union, so removing one can only remove access. The first matching rule is the
    one named in the journal.
    """

    host: str = Field(description="Exact host (or IP), or '*.suffix' for every subdomain.")
    ports: Annotated[list[Annotated[int, Field(ge=1, le=65535)]], Field(min_length=1)] = Field(
        default_factory=lambda: [80, 443], description="Destination ports."
    )
    methods: Annotated[list[HttpMethod], Field(min_length=1)] = Field(
        default_factory=_read_only_methods,
        description="Plain-HTTP methods (HTTPS CONNECT is host+port).",
    )
    request_bytes: Annotated[int, Field(gt=0)] | None = Field(
        default=None,
        description="Largest request body one request under this rule may send (None: only "
        "the run's upload budget limits it).",
    )

    @field_validator("host")
    @classmethod
    def _host(cls, value: str) -> str:
        return _check_host(value)

    @model_validator(mode="after")
    def _no_duplicates(self) -> GatewayAllow:
        _unique(self.ports, "ports")
        _unique(self.methods, "methods")
        return self

    def matches(self, host: str, port: int, method: str | None) -> bool:
        """``method`` is None for CONNECT (HTTPS), which is checked by host and port only."""
        if not host_covers(self.host, host.lower()) or port not in self.ports:
            return False
        return method is None or method in self.methods

    def within(self, grant: GatewayAllow) -> bool:
        """Does ``grant`` allow everything this rule allows?"""
        return (
            host_covers(grant.host, self.host)
            and set(self.ports) <= set(grant.ports)
            and set(self.methods) <= set(grant.methods)
            and (
                grant.request_bytes is None
                or (self.request_bytes is not None and self.request_bytes <= grant.request_bytes)
            )
        )


class GatewayRoute(_Strict):
    """A credential route: the gateway adds ``header: value`` (with the secret) upstream."""

    name: str = Field(description="Route name; the box calls /route/<name>/<path>.")
    upstream: str = Field(description="http(s) base URL the route forwards to.")
    header: str = Field(description="Header the gateway sets upstream, e.g. Authorization.")
    value: str = Field(default="{secret}", description="Header value; {secret} is replaced.")
    secret_env: str | None = Field(default=None, description="Host env var holding the secret.")
    secret_file: str | None = Field(default=None, description="Host file holding the secret.")
    methods: Annotated[list[HttpMethod], Field(min_length=1)] = Field(
        default_factory=_read_only_methods, description="Methods the route forwards."
    )
    allow_private: bool = Field(
        default=False,
        description=(
            "Let the upstream be a loopback or private address, named or resolved (a local "
            "model server on localhost or 127.0.0.1); the box still reaches only the gateway."
        ),
    )

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _ROUTE_NAME.fullmatch(value):
            raise ValueError("route name: lowercase letters, digits, '-' or '_' (max 63)")
        return value

    @field_validator("upstream")
    @classmethod
    def _upstream(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("upstream must be an http:// or https:// URL with a host")
        if parts.username or parts.password or parts.query or parts.fragment:
            raise ValueError("upstream may not carry credentials, a query or a fragment")
        # The gateway reads the port when a request arrives; a bad one must fail at deploy.
        try:
            port = parts.port
        except ValueError as exc:  # not a number, or above 65535
            raise ValueError("upstream has an invalid port") from exc
        if port == 0:
            raise ValueError("upstream has an invalid port")
        return value

    @field_validator("header")
    @classmethod
    def _header(cls, value: str) -> str:
        if not _HEADER_NAME.fullmatch(value):
            raise ValueError("header must be an HTTP header name")
        return value

    @field_validator("value")
    @classmethod
    def _value(cls, value: str) -> str:
        if "{secret}" not in value:
            raise ValueError("value must contain {secret}")
        if "\r" in value or "\n" in value:
            raise ValueError("value may not contain line breaks")
        return value

    @field_validator("secret_env")
    @classmethod
    def _secret_env(cls, value: str | None) -> str | None:
        if value is not None and not ENV_NAME.fullmatch(value):
            raise ValueError("secret_env must be an environment variable name")
        return value

    @field_validator("secret_file")
    @classmethod
    def _secret_file(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("/"):
            raise ValueError("secret_file must be an absolute path on the host")
        return value

    @model_validator(mode="after")
    def _one_secret(self) -> GatewayRoute:
        if (self.secret_env is None) == (self.secret_file is None):
            raise ValueError("set exactly one of secret_env and secret_file")
        _unique(self.methods, "methods")
        return self

    def within(self, grant: GatewayRoute) -> bool:
        """Same route as ``grant`` (name, upstream, credential) with no more methods."""
        same = self.model_dump(exclude={"methods"}) == grant.model_dump(exclude={"methods"})
        return same and set(self.methods) <= set(grant.methods)


class GatewayBudget(_Strict):
    requests_per_run: Annotated[int, Field(gt=0), LOWER] = Field(
        default=500, description="Requests one run may make (then 429)."
    )
    response_bytes_per_run: Annotated[int, Field(gt=0), LOWER] = Field(
        default=104_857_600,
        description="Response bytes one run may receive (a body is cut at the last one; "
        "later requests get 429).",
    )
    requests_per_imp_per_day: Annotated[int, Field(gt=0), LOWER] = Field(
        default=5000, description="Requests all runs of one imp may make per UTC day."
    )
    control_requests_per_minute: Annotated[int, Field(gt=0), LOWER] = Field(
        default=60,
        description="Checks and checkpoints (/impyard/...) one run may ask for per minute.",
    )
    request_bytes_per_run: Annotated[int, Field(gt=0), LOWER] = Field(
        default=10_485_760,
        description="Request body bytes (and tunnelled bytes towards upstreams) one run may "
        "send (then 429, or the connection is cut).",
    )


class GatewayArchive(_Strict):
    """The opt-in source archive: bodies of relayed responses, stored by their SHA-256."""

    enabled: Annotated[bool, DISABLE] = Field(
        default=False, description="Store each relayed response body under archive/sha256/."
    )
    max_bytes_per_run: Annotated[int, Field(gt=0), LOWER] = Field(
        default=104_857_600, description="New bytes one run may add to the archive."
    )
    max_object_bytes: Annotated[int, Field(gt=0), LOWER] = Field(
        default=67_108_864, description="Largest body the archive stores."
    )
    max_total_bytes: Annotated[int, Field(gt=0), LOWER] = Field(
        default=10_737_418_240, description="Largest size of the whole archive."
    )
    # Objects are shared by every imp that fetched the same bytes, so how long they are kept
    # can only be one data-root-wide value.
    retention_days: Annotated[int, Field(gt=0), FIXED] = Field(
        default=90, description="Days an object is kept after it was last stored."
    )


class GatewayPolicy(_Strict):
    enabled: Annotated[bool, DISABLE] = Field(
        default=True, description="Off: the box gets no proxy variables and no listener."
    )
    port: Annotated[int, Field(ge=1, le=65535), FIXED] = Field(
        default=3128, description="Loopback port of the gateway inside the box."
    )
    inspect_tls: Annotated[bool, REQUIRE] = Field(
        default=True,
        description=(
            "Terminate HTTPS with the data root's CA and judge each inner request by method "
            "and path; off keeps a host:port tunnel."
        ),
    )
    allow: Annotated[list[GatewayAllow], SUBSET] = Field(
        default_factory=list, description="Allow rules; no rule = every request is denied."
    )
    route: Annotated[list[GatewayRoute], SUBSET] = Field(
        default_factory=list, description="Credential routes."
    )
    budget: GatewayBudget = Field(default_factory=GatewayBudget)
    secret_query_params: Annotated[list[QueryParamName], SUPERSET] = Field(
        default_factory=lambda: list(DEFAULT_SECRET_QUERY_PARAMS),
        description="Query parameters whose values receipts replace with REDACTED (any case).",
    )
    archive: GatewayArchive = Field(default_factory=GatewayArchive)

    @model_validator(mode="after")
    def _unique_names(self) -> GatewayPolicy:
        _unique([route.name for route in self.route], "route names")
        _unique(self.secret_query_params, "secret query parameters")
        return self

    def find_allow(self, host: str, port: int, method: str | None) -> int | None:
        """Index of the first allow rule matching the request, or None (deny)."""
        for index, rule in enumerate(self.allow):
            if rule.matches(host, port, method):
                return index
        return None
