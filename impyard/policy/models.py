"""The typed owner policy: what every key means, its default, its range, and how an overlay may
change it.

Models are strict (``1`` is not a bool, ``"100"`` is not an int) and forbid unknown keys, so a
typo in a policy file is an error instead of a silently ignored line. Every leaf field carries
an ``Overlay`` marker naming the one rule that governs it in a per-imp overlay; ``overlay.py``
applies the rules and the README table is written from them.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field, field_validator

from impyard.common.contract import DEFAULT_IMAGE, DEFAULT_USER, parse_user
from impyard.credentials import find_credentials
from impyard.policy.base import (
    DISABLE,
    ENV_NAME,
    FIXED,
    FREE,
    HARDEN_RUNTIME,
    HARDEN_WRITE_FROM,
    LOWER,
    REQUIRE,
    Overlay,
    _Strict,
)
from impyard.policy.cluster import ClusterPolicy
from impyard.policy.gateway import (
    GatewayAllow,
    GatewayArchive,
    GatewayBudget,
    GatewayPolicy,
    GatewayRoute,
    HttpMethod,
    host_covers,
)

__all__ = [
    "BoxPolicy",
    "BoxRuntime",
    "EffectivePolicy",
    "GatewayAllow",
    "GatewayArchive",
    "GatewayBudget",
    "GatewayPolicy",
    "GatewayRoute",
    "HttpMethod",
    "KnowledgePolicy",
    "Overlay",
    "Policy",
    "host_covers",
]


#: Most automatic reworks one task may get: each is a whole box run.
MAX_REWORK_ATTEMPTS = 10

# Docker refuses a container memory limit below 6 MiB.
MIN_MEMORY_BYTES = 6 * 1024 * 1024


#: ``[box.env]`` may set any variable except the ones the host owns: the run's
#: identity (IMPYARD_*, but for the two an agent adapter reads), the proxy that
#: makes the gateway the only way out, where temporary files go, and the CA
#: trust that ``box.extra_ca_file`` sets.
BOX_ENV_ALLOWED_IMPYARD = frozenset({"IMPYARD_MODEL", "IMPYARD_MODEL_ROUTE"})
BOX_ENV_PROXY = frozenset({"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY", "FTP_PROXY"})
BOX_ENV_HOST_OWNED = frozenset(
    {
        "TMPDIR",
        "HOME",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "CURL_CA_BUNDLE",
        "REQUESTS_CA_BUNDLE",
        "NODE_EXTRA_CA_CERTS",
        "GIT_SSL_CAINFO",
        "PIP_CERT",
        "NPM_CONFIG_CAFILE",
    }
)
BOX_ENV_MAX_VALUE = 4096
BOX_ENV_MAX_KEYS = 64


def _box_env_name(name: str) -> str:
    """A ``[box.env]`` name the host does not own (ValueError says why not)."""
    if not ENV_NAME.fullmatch(name):
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


#: The engine runtimes a box may run under (the engine registers runsc as gVisor).
BoxRuntime = Literal["runc", "runsc"]


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
    candidate_max_bytes: Annotated[int, Field(gt=0), LOWER] = Field(
        default=100_000_000,
        description="Most bytes of files over max_file_chars a candidate or quarantine keeps "
        "(never more than max_repo_bytes).",
    )
    checkpoint_on_clean_exit: Annotated[bool, DISABLE] = Field(
        default=True, description="Validate and integrate the checkout when the box exits 0."
    )
    reorganization_requires_exclusive_lease: Annotated[bool, REQUIRE] = Field(
        default=True, description="A reorganize run holds the imp's one exclusive lease."
    )
    max_deletions: Annotated[int, Field(ge=0), LOWER] = Field(
        default=20,
        description="Most files one run may delete and still land on its own; a run deleting "
        "more waits, held, for the owner's `candidates approve`.",
    )
    write_from: Annotated[Literal["any-run", "clean-room"], HARDEN_WRITE_FROM] = Field(
        default="clean-room",
        description="Which runs may write knowledge: clean-room (a run carrying conversation "
        "content, a --channel Memory block, gets a read-only checkout and lands nothing) or "
        "any-run. An overlay may move any-run to clean-room, never back.",
    )


class WarmPolicy(_Strict):
    """Ready boxes kept by ``serve`` so a run starts in an already running box."""

    boxes: Annotated[int, Field(ge=0, le=64), LOWER] = Field(
        default=0,
        description="Ready boxes kept for each distinct box shape of the imps using them "
        "(0: runs always start a fresh box; an overlay may lower it, 0 opting the imp out).",
    )
    max_age_seconds: Annotated[int, Field(gt=0), LOWER] = Field(
        default=3600, description="A ready box older than this is replaced."
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
    runtime: Annotated[BoxRuntime, HARDEN_RUNTIME] = Field(
        default="runc",
        description="Engine runtime of the box: runc (the host's kernel) or runsc (gVisor, "
        "a kernel of its own); an overlay may move an imp from runc to runsc, never back.",
    )
    env: Annotated[dict[BoxEnvName, BoxEnvValue], Field(max_length=BOX_ENV_MAX_KEYS), FREE] = Field(
        default_factory=dict,
        description="Non-secret environment variables for the box (IMPYARD_MODEL selects the "
        "agent's model); an overlay adds or replaces entries.",
    )
    warm: WarmPolicy = Field(default_factory=WarmPolicy)
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


class RetentionPolicy(_Strict):
    """How long what a data root keeps is kept (``impyard gc``; serve runs it periodically).
    One value per data root: org only. Days may be fractional (0.5 is twelve hours)."""

    quarantine_days: Annotated[float, Field(gt=0), FIXED] = Field(
        default=14, description="Days a quarantined run (its ref and kept checkout) is kept."
    )
    candidate_days: Annotated[float, Field(gt=0), FIXED] = Field(
        default=30, description="Days a rejected or conflicting candidate ref is kept."
    )
    finished_run_days: Annotated[float, Field(gt=0), FIXED] = Field(
        default=30, description="Days a finished run's record (runs/<id>/) is kept."
    )
    journal_max_bytes: Annotated[int, Field(gt=0), FIXED] = Field(
        default=67_108_864,
        description="journal.jsonl is rotated to numbered, compressed files past this size.",
    )
    gc_interval_seconds: Annotated[int, Field(gt=0), FIXED] = Field(
        default=3600, description="How often serve runs gc."
    )


class ReviewPolicy(_Strict):
    """What follows a run whose change the lane refused."""

    rework_attempts: Annotated[int, Field(ge=0, le=MAX_REWORK_ATTEMPTS), LOWER] = Field(
        default=0,
        description="Rework tasks queued after a rejection, at most this many per original "
        "task: each starts from the refused files and quotes every violation (0: none).",
    )


class BackupPolicy(_Strict):
    """Where every imp's knowledge is pushed after each change. Org only."""

    remotes: Annotated[list[str], FIXED] = Field(
        default_factory=list,
        description=(
            "Base locations (a local path, file:// or any URL libgit2 can push to); each imp "
            "goes to <remote>/<imp>.git."
        ),
    )


class Policy(_Strict):
    """An org policy, or the effective policy of one imp (org with its overlay applied)."""

    knowledge: KnowledgePolicy = Field(default_factory=KnowledgePolicy)
    box: BoxPolicy = Field(default_factory=BoxPolicy)
    gateway: GatewayPolicy = Field(default_factory=GatewayPolicy)
    review: ReviewPolicy = Field(default_factory=ReviewPolicy)
    retention: RetentionPolicy = Field(default_factory=RetentionPolicy)
    backup: BackupPolicy = Field(default_factory=BackupPolicy)
    cluster: ClusterPolicy = Field(default_factory=ClusterPolicy)


# What a run receives; the same shape as the org policy.
EffectivePolicy = Policy
