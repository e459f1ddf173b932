"""The typed owner policy: what every key means, its default, its range, and how an overlay may
change it.

Models are strict (``1`` is not a bool, ``"100"`` is not an int) and forbid unknown keys, so a
typo in a policy file is an error instead of a silently ignored line. Every leaf field carries
an ``Overlay`` marker naming the one rule that governs it in a per-imp overlay; ``overlay.py``
applies the rules and the README table is written from them.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from impyard.contract import DEFAULT_IMAGE, DEFAULT_USER, parse_user
from impyard.credentials import find_credentials

OverlayRule = Literal["lower", "disable", "require", "fixed", "free", "subset"]


@dataclass(frozen=True)
class Overlay:
    """How an imp overlay may change a key.

    lower    the overlay may lower the value, never raise it (limits, budgets)
    disable  the overlay may turn it off, never on (features)
    require  the overlay may turn it on, never off (safety requirements)
    fixed    only the org file sets it; an overlay must repeat the org value or omit it
    free     the overlay may set any valid value (it picks what runs, not what it may do)
    subset   the overlay may drop entries; each entry it keeps must fit within an org entry
    """

    rule: OverlayRule


LOWER = Overlay("lower")
DISABLE = Overlay("disable")
REQUIRE = Overlay("require")
FIXED = Overlay("fixed")
FREE = Overlay("free")
SUBSET = Overlay("subset")

# Docker refuses a container memory limit below 6 MiB.
MIN_MEMORY_BYTES = 6 * 1024 * 1024

# Plain-HTTP methods a gateway rule may grant. HTTPS goes through CONNECT, which the gateway
# checks by host and port only, so CONNECT is never listed here.
HttpMethod = Literal["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]


def _read_only_methods() -> list[HttpMethod]:
    return ["GET", "HEAD"]


_LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")
_ROUTE_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
_HEADER_NAME = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]+$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

#: ``[box.env]`` may set any variable except the ones the host owns: the run's
#: identity (IMPYARD_*, but for the two an agent adapter reads), the proxy that
#: makes the gateway the only way out, where temporary files go, and the CA
#: trust that ``box.extra_ca_file`` sets.
BOX_ENV_ALLOWED_IMPYARD = frozenset({"IMPYARD_MODEL", "IMPYARD_MODEL_ROUTE"})
BOX_ENV_PROXY = frozenset({"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY", "FTP_PROXY"})
BOX_ENV_HOST_OWNED = frozenset(
    {"TMPDIR", "HOME", "SSL_CERT_FILE", "SSL_CERT_DIR", "CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS"}
)
BOX_ENV_MAX_VALUE = 4096
BOX_ENV_MAX_KEYS = 64


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


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


def _box_env_name(name: str) -> str:
    """A ``[box.env]`` name the host does not own (ValueError says why not)."""
    if not _ENV_NAME.fullmatch(name):
        raise ValueError(f"{name!r} is not an environment variable name")
    upper = name.upper()
    if upper.startswith("IMPYARD_") and name not in BOX_ENV_ALLOWED_IMPYARD:
        allowed = " and ".join(sorted(BOX_ENV_ALLOWED_IMPYARD))
        raise ValueError(f"{name}: IMPYARD_* variables come from the host (only {allowed})")
    if upper in BOX_ENV_PROXY:
        raise ValueError(f"{name}: the proxy variables point at the gateway; the host sets them")
    if upper in BOX_ENV_HOST_OWNED:
        raise ValueError(
            f"{name}: set by the host (TMPDIR and HOME are the tmpfs; CA trust is "
            "box.extra_ca_file)"
        )
    return name


def _box_env_value(value: str) -> str:
    if "\0" in value:
        raise ValueError("the value contains a NUL byte")
    labels = find_credentials(value)
    if labels:
        raise ValueError(
            f"the value looks like a credential ({', '.join(labels)}); secrets stay on the "
            "host, in a gateway.route"
        )
    return value


BoxEnvName = Annotated[str, AfterValidator(_box_env_name)]
BoxEnvValue = Annotated[str, Field(max_length=BOX_ENV_MAX_VALUE), AfterValidator(_box_env_value)]


def _unique(values: Sequence[Hashable], what: str) -> None:
    if len(set(values)) != len(values):
        raise ValueError(f"{what} are listed more than once")


class KnowledgePolicy(_Strict):
    enabled: Annotated[bool, DISABLE] = Field(
        default=True, description="Mount a knowledge checkout and checkpoint what the imp writes."
    )
    normal_mode: Annotated[Literal["append"], FIXED] = Field(
        default="append", description="Write mode of ordinary (non --reorganize) runs."
    )
    max_file_chars: Annotated[int, Field(gt=0), LOWER] = Field(
        default=200_000, description="Largest file, in characters, a checkpoint may contain."
    )
    max_repo_bytes: Annotated[int, Field(gt=0), LOWER] = Field(
        default=1_000_000_000, description="Largest total size of the knowledge tree, in bytes."
    )
    checkpoint_on_clean_exit: Annotated[bool, DISABLE] = Field(
        default=True, description="Validate and integrate the checkout when the box exits 0."
    )
    reorganization_requires_exclusive_lease: Annotated[bool, REQUIRE] = Field(
        default=True, description="A reorganize run holds the imp's one exclusive lease."
    )


class BoxPolicy(_Strict):
    image: Annotated[str, Field(min_length=1), FREE] = Field(
        default=DEFAULT_IMAGE, description="Docker image the box runs."
    )
    command: Annotated[list[Annotated[str, Field(min_length=1)]], Field(min_length=1), FREE] = (
        Field(
            default_factory=lambda: ["/opt/impyard/bin/imp"],
            description="Argument vector the box runs.",
        )
    )
    user: Annotated[str, FIXED] = Field(
        default=DEFAULT_USER, description="Non-root uid:gid the box runs as."
    )
    memory_bytes: Annotated[int, Field(ge=MIN_MEMORY_BYTES), LOWER] = Field(
        # A full /tmp (2 GiB of tmpfs pages, charged to the box) plus 1 GiB for a Node agent.
        default=3 * 1024**3,
        description="Memory limit of the box, /tmp's files included (Docker minimum 6 MiB).",
    )
    cpus: Annotated[float, Field(gt=0), LOWER] = Field(default=1.0, description="CPU limit.")
    pids_limit: Annotated[int, Field(gt=0), LOWER] = Field(
        default=256, description="Most processes and threads the box may have at once."
    )
    timeout_seconds: Annotated[int, Field(gt=0), LOWER] = Field(
        default=3600, description="Wall-clock limit; the box is killed and quarantined after it."
    )
    network: Annotated[Literal["none"], FIXED] = Field(
        default="none", description="Docker network of the box; egress only via the gateway."
    )
    env: Annotated[dict[BoxEnvName, BoxEnvValue], Field(max_length=BOX_ENV_MAX_KEYS), FREE] = Field(
        default_factory=dict,
        description="Non-secret environment variables for the box (IMPYARD_MODEL selects the "
        "agent's model); an overlay adds or replaces entries.",
    )
    extra_ca_file: Annotated[str | None, FIXED] = Field(
        default=None,
        description="Host path of a PEM file whose certificates the box trusts beside the "
        "image's system roots (internal services).",
    )

    @field_validator("extra_ca_file")
    @classmethod
    def _extra_ca_file(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("/"):
            raise ValueError("extra_ca_file must be an absolute path on the host")
        return value

    @field_validator("user")
    @classmethod
    def _non_root(cls, value: str) -> str:
        try:
            uid, gid = parse_user(value)
        except ValueError:
            raise ValueError("user must be numeric 'uid:gid'") from None
        if uid == 0 or gid == 0:
            raise ValueError("the box never runs as root (uid or gid 0)")
        return value


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
        if value is not None and not _ENV_NAME.fullmatch(value):
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
        default=104_857_600, description="Response bytes one run may receive (then 429)."
    )
    requests_per_imp_per_day: Annotated[int, Field(gt=0), LOWER] = Field(
        default=5000, description="Requests all runs of one imp may make per UTC day."
    )


class GatewayPolicy(_Strict):
    enabled: Annotated[bool, DISABLE] = Field(
        default=True, description="Off: the box gets no proxy variables and no listener."
    )
    port: Annotated[int, Field(ge=1, le=65535), FIXED] = Field(
        default=3128, description="Loopback port of the gateway inside the box."
    )
    allow: Annotated[list[GatewayAllow], SUBSET] = Field(
        default_factory=list, description="Allow rules; no rule = every request is denied."
    )
    route: Annotated[list[GatewayRoute], SUBSET] = Field(
        default_factory=list, description="Credential routes."
    )
    budget: GatewayBudget = Field(default_factory=GatewayBudget)

    @model_validator(mode="after")
    def _unique_routes(self) -> GatewayPolicy:
        _unique([route.name for route in self.route], "route names")
        return self

    def find_allow(self, host: str, port: int, method: str | None) -> int | None:
        """Index of the first allow rule matching the request, or None (deny)."""
        for index, rule in enumerate(self.allow):
            if rule.matches(host, port, method):
                return index
        return None


class Policy(_Strict):
    """An org policy, or the effective policy of one imp (org with its overlay applied)."""

    knowledge: KnowledgePolicy = Field(default_factory=KnowledgePolicy)
    box: BoxPolicy = Field(default_factory=BoxPolicy)
    gateway: GatewayPolicy = Field(default_factory=GatewayPolicy)


# What a run receives; the same shape as the org policy.
EffectivePolicy = Policy
