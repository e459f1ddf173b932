"""The systemd unit that runs ``impyard serve``, rendered as text.

Every directive in it is there for a reason the unit's own comments give, and every
hardening directive left out is named there with what it would break: serve runs as
root because it loop-mounts run spaces and joins box network namespaces, and the
mounts it makes must be the ones dockerd sees.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from impyard import __version__
from impyard.common.errors import UsageError

DEFAULT_UNIT_PATH = Path("/etc/systemd/system/impyard.service")
DEFAULT_ENV_FILE = Path("/etc/impyard/impyard.env")
#: Beyond serve's grace period: killing the boxes left and quarantining their runs
#: (a snapshot of each checkout, a ref, the manifest) before systemd sends SIGKILL.
STOP_MARGIN_SECONDS = 90
GRACE_VARIABLE = "IMPYARD_SHUTDOWN_GRACE_SECONDS"

# What systemd accepts in User= (a name or a numeric uid).
_USER = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}$")
_PLAIN_ARG = re.compile(r"^[A-Za-z0-9_@%+=:,./-]+$")


@dataclass(frozen=True)
class UnitOptions:
    #: How to start impyard: its console script, or the interpreter with ``-m impyard``.
    command: list[str]
    home: Path
    env_file: Path
    user: str | None
    grace_seconds: float


def impyard_command() -> list[str]:
    """The impyard in use, absolute: this process's console script, the one beside the
    running interpreter (a venv's ``bin/``), the one on PATH, else the interpreter itself."""
    argv0 = Path(sys.argv[0]).absolute()
    candidates = [argv0] if argv0.name == "impyard" else []
    candidates.append(Path(sys.executable).parent / "impyard")
    found = shutil.which("impyard")
    if found:
        candidates.append(Path(found).absolute())
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return [str(candidate)]
    return [sys.executable, "-m", "impyard"]


def grace_from_env_file(path: Path) -> float | None:
    """The grace period the env file gives serve, if it sets one (systemd's simple
    ``KEY=VALUE`` lines; an unreadable file or value is ignored)."""
    try:
        lines = path.read_text().splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    value: float | None = None
    for line in lines:
        key, sep, raw = line.strip().partition("=")
        if sep and key.strip() == GRACE_VARIABLE:
            try:
                value = float(raw.strip().strip("'\""))
            except ValueError:
                continue
    return value


def stop_timeout(grace_seconds: float) -> int:
    return math.ceil(max(grace_seconds, 0.0)) + STOP_MARGIN_SECONDS


def _check_line(what: str, value: str) -> None:
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise UsageError(f"{what} {value!r} holds a control character: a unit cannot say it")


def quote_arg(arg: str) -> str:
    """One ExecStart= word: specifiers (%) and variables ($) escaped, quoted when needed."""
    _check_line("the argument", arg)
    escaped = arg.replace("%", "%%").replace("$", "$$")
    if _PLAIN_ARG.fullmatch(arg):
        return escaped
    return '"' + escaped.replace("\\", "\\\\").replace('"', '\\"') + '"'


def check_options(options: UnitOptions) -> None:
    if options.user is not None and not _USER.fullmatch(options.user):
        raise UsageError(f"--user {options.user!r} is not a user name systemd accepts")
    env = str(options.env_file)
    _check_line("--env-file", env)
    if any(c.isspace() for c in env):
        raise UsageError(f"--env-file {env!r}: a path with whitespace cannot be named here")
    if not options.home.is_absolute() or not options.env_file.is_absolute():
        raise UsageError("the data root and the env file must be absolute paths")


def render_unit(options: UnitOptions) -> str:
    check_options(options)
    exec_start = " ".join(
        quote_arg(arg) for arg in [*options.command, "--home", str(options.home), "serve"]
    )
    env_file = str(options.env_file).replace("%", "%%")
    grace = f"{options.grace_seconds:g}"
    user = (
        f"User={options.user}\n"
        if options.user is not None and options.user not in ("root", "0")
        else ""
    )
    return f"""\
# Written by `impyard service install` (impyard {__version__}); `impyard service print`
# shows what it would write now. Enable it with:
#   systemctl daemon-reload && systemctl enable --now impyard

[Unit]
Description=Impyard: imps' queued tasks run in Docker boxes (impyard serve)
# serve speaks to the engine through /var/run/docker.sock. Wants=, not Requires=: an
# engine restart must not stop serve, which waits for a lost engine and carries on.
# The gateway's upstream connections and backup pushes need the network.
After=docker.service network-online.target
Wants=docker.service network-online.target

[Service]
Type=exec
{user}ExecStart={exec_start}
# Secrets of gateway credential routes (secret_env, e.g. IMPYARD_SECRET_LLM) and
# IMPYARD_* settings, KEY=VALUE a line; keep it root's, mode 0600. "-": it may be absent.
EnvironmentFile=-{env_file}
Restart=on-failure
RestartSec=5s

# Stopping. KillMode=mixed sends SIGTERM to serve alone (not to a mount or git it may be
# running): serve takes no new task and gives running boxes its grace period
# ({GRACE_VARIABLE}, {grace} s when this was written), then kills them and
# quarantines their runs, never integrating half-done work. A second SIGTERM
# (`systemctl kill --kill-whom=main impyard`; --kill-who= before systemd 252) kills the
# boxes at once and quarantines their runs.
# TimeoutStopSec is the grace plus {STOP_MARGIN_SECONDS} s to quarantine; only then does SIGKILL
# reach what is left. Boxes belong to dockerd, never to this unit's cgroup: serve kills them.
# Changed the grace period? Run `impyard service install --force` again.
KillMode=mixed
KillSignal=SIGTERM
TimeoutStopSec={stop_timeout(options.grace_seconds)}
# The gateway holds sockets for every box connection and its upstream.
LimitNOFILE=65536

# Hardening. serve runs as root: it loop-mounts each run's space (mount, mkfs.ext4,
# /dev/loop*), enters each box's network namespace (setns, CAP_SYS_ADMIN) to bind its
# gateway, and writes the data root. The mounts it makes must be the ones dockerd sees,
# so nothing here may give serve a mount namespace of its own. systemd makes one for
# PrivateTmp=, ProtectSystem=, ProtectHome=, ReadWritePaths=/ReadOnlyPaths=,
# PrivateDevices=, PrivateMounts=, ProtectKernelTunables=, ProtectKernelModules=,
# ProtectKernelLogs=, ProtectControlGroups= and ProtectProc=, and propagation from it back
# to the host is cut (even with MountFlags=shared): dockerd would bind the empty directory
# under a run space into the box, outside the space's size limit, and the host would
# snapshot the space the box never saw. Also left out: ProtectClock= and DeviceAllow=
# (a device allow-list blocks /dev/loop-control and /dev/loop*), RestrictNamespaces=
# (refuses setns), PrivateNetwork= (upstreams and backups leave from the host's network),
# MemoryDenyWriteExecute= (libffi callbacks, as pygit2's push credentials use, need
# writable code) and CapabilityBoundingSet= (mount and setns need CAP_SYS_ADMIN, reading
# what boxes leave needs CAP_DAC_*; a short list would break runs, a long one buys little).
#
# serve is root already and nothing it starts may gain more (setuid, file capabilities).
NoNewPrivileges=yes
# The sockets serve makes: unix (the engine), IPv4 and IPv6 (gateway listeners in boxes,
# upstreams, backup remotes), netlink (glibc's getaddrinfo asks which families exist).
RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK
# Seccomp filters, inherited by mount, mkfs.ext4 and git: none of them needs what is denied.
RestrictSUIDSGID=yes
RestrictRealtime=yes
LockPersonality=yes
SystemCallArchitectures=native

[Install]
WantedBy=multi-user.target
"""
