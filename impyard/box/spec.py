"""A box is data: everything the engine needs to launch one, and what came out.

No docker imports here: the run pipeline builds and records these cheaply.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from impyard.common.contract import DEFAULT_USER, TMP_SIZE_BYTES

#: The box's /tmp, the contract's place for temporary files: 2 GiB, world-writable
#: with the sticky bit, no setuid or device files. A runtime constant on
#: purpose: neither owner nor imp policy may change it.
TMP_TMPFS = f"rw,nosuid,nodev,size={TMP_SIZE_BYTES},mode=1777"

LABEL_RUN = "impyard.run"
LABEL_IMP = "impyard.imp"
#: The data root a container or volume belongs to (``root_label``): one engine serves
#: many data roots, and each removes only what is its own.
LABEL_ROOT = "impyard.root"
#: What a container or volume that is not a run's box does (``box.launcher.helpers``), and the lock
#: file, relative to the data root, its creator holds while it uses it.
LABEL_HELPER = "impyard.helper"
LABEL_LOCK = "impyard.lock"


MountKind = Literal["bind", "volume"]
#: runc: the host's kernel behind namespaces, cgroups and seccomp; runsc: gVisor's own.
Runtime = Literal["runc", "runsc"]


@dataclass(frozen=True)
class BoxMount:
    """``source`` is an absolute host path (bind) or a volume name (volume)."""

    source: str
    target: str
    read_only: bool
    kind: MountKind = "bind"

    def __post_init__(self) -> None:
        if not self.target.startswith("/"):
            raise ValueError(f"mount target must be absolute: {self.target!r}")
        if self.kind == "bind" and not self.source.startswith("/"):
            raise ValueError(f"bind mount source must be an absolute host path: {self.source!r}")
        if self.target == "/tmp" or self.target.startswith("/tmp/"):
            # /tmp is the box's private tmpfs; a host path there would outlive the box.
            raise ValueError(f"nothing may be mounted at or under /tmp: {self.target!r}")


def root_label(root: Path) -> str:
    """The ``LABEL_ROOT`` value of the data root at ``root``: its real path, hashed."""
    return hashlib.sha256(os.fsencode(os.path.realpath(root))).hexdigest()[:24]


def box_labels(run_id: str, imp: str, *, root: Path, **extra: str) -> dict[str, str]:
    """The labels every container and volume Impyard creates carries; crash recovery
    finds them by these."""
    return {LABEL_RUN: run_id, LABEL_IMP: imp, LABEL_ROOT: root_label(root), **extra}


def _is_root(user: str) -> bool:
    name = user.split(":", 1)[0].strip()
    return name in ("", "0", "root")


@dataclass(frozen=True)
class BoxSpec:
    """One box. The hardening (no capabilities, no-new-privileges, read-only
    root, ``--network none``, tmpfs /tmp) is not configurable here on purpose."""

    image: str
    command: list[str]
    labels: dict[str, str]
    user: str = DEFAULT_USER
    env: dict[str, str] = field(default_factory=dict)
    mounts: list[BoxMount] = field(default_factory=list)
    memory_bytes: int = 512 * 1024 * 1024
    cpus: float = 1.0
    pids_limit: int = 256
    network: Literal["none"] = "none"
    runtime: Runtime = "runc"
    timeout_seconds: float = 3600.0
    name: str | None = None
    #: Replaces the image's entrypoint, e.g. ``["/opt/impyard/bin/box-init"]``.
    entrypoint: list[str] | None = None
    working_dir: str | None = None

    def __post_init__(self) -> None:
        missing = [k for k in (LABEL_RUN, LABEL_IMP, LABEL_ROOT) if not self.labels.get(k)]
        if missing:
            raise ValueError(f"box labels must name the run, imp and data root; missing {missing}")
        if _is_root(self.user):
            raise ValueError(f"boxes never run as root (user {self.user!r})")
        if self.runtime not in ("runc", "runsc"):
            raise ValueError(f"unknown box runtime {self.runtime!r}")
        if self.network != "none":
            raise ValueError("boxes have no network; egress goes through the gateway")
        if self.memory_bytes <= 0 or self.cpus <= 0 or self.pids_limit <= 0:
            raise ValueError("memory, cpu and pids limits must be positive")
        if self.timeout_seconds <= 0:
            raise ValueError("timeout_seconds must be positive")
        targets = [m.target for m in self.mounts]
        if len(set(targets)) != len(targets):
            raise ValueError(f"duplicate mount targets: {targets}")
        for key in self.env:
            if not key or "=" in key:
                raise ValueError(f"invalid environment variable name {key!r}")

    @property
    def run_id(self) -> str:
        return self.labels[LABEL_RUN]

    @property
    def imp(self) -> str:
        return self.labels[LABEL_IMP]

    def environment(self) -> dict[str, str]:
        """The box's environment: TMPDIR always points at the tmpfs (box contract)."""
        return {**self.env, "TMPDIR": "/tmp"}


@dataclass(frozen=True)
class StartedBox:
    container_id: str
    image_id: str
    #: The box's live output (``logs.LogFollower``) when a log path was given at start.
    follower: Any = None


@dataclass(frozen=True)
class BoxExit:
    exit_code: int
    oom_killed: bool
    timed_out: bool
    #: Why the box did not run or finish normally (engine error text, never started, ...).
    error: str | None
    container_id: str
    image_id: str
    started_at: str | None
    finished_at: str | None
    log_bytes: int = 0
    log_truncated: bool = False
    #: Who reported the exit first: ``containerd`` (a clean exit, seen as the shim reaped
    #: the box's first process) or ``engine`` (its wait answer).
    seen_by: str = "engine"

    @property
    def clean(self) -> bool:
        """A clean exit: status 0, not OOM-killed, not timed out, no engine error."""
        return self.exit_code == 0 and not self.oom_killed and not self.timed_out and not self.error


@dataclass(frozen=True)
class BoxInfo:
    """A box found on the engine by its labels (crash recovery)."""

    container_id: str
    run_id: str | None
    imp: str | None
    status: str
    exit_code: int | None
    oom_killed: bool
    started_at: str | None
    finished_at: str | None
    image_id: str
    labels: dict[str, str]
