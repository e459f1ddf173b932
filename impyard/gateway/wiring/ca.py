"""The data root's TLS-inspection CA, and the leaf certificates it mints per host.

``impyard init`` creates the CA (any later step creates it if an older data root
lacks one): an ECDSA P-256 key in ``gateway/ca/ca.key`` readable only by the
host user, in a directory only that user may enter, and its certificate in
``ca.pem``, which boxes trust. The key is never mounted into a box or sent
anywhere; only the gateway, on the host, signs with it.

Leaves are short-lived (``LEAF_DAYS``), minted on first use for a host and
kept on disk per data root (``leaves/<host>.pem``, key and certificate, 0600)
and in memory per process; one within ``RENEW_BEFORE`` of its end is replaced.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import ssl
import threading
from dataclasses import dataclass
from pathlib import Path

from impyard.common.errors import ImpyardError
from impyard.common.fsutil import atomic_write_text, locked

LEAF_DAYS = 7
RENEW_BEFORE = datetime.timedelta(days=1)


class CaError(ImpyardError):
    """The inspection CA or a leaf could not be created or read."""


@dataclass(frozen=True)
class CaFiles:
    directory: Path

    @property
    def key(self) -> Path:
        return self.directory / "ca.key"

    @property
    def cert(self) -> Path:
        return self.directory / "ca.pem"

    @property
    def leaves(self) -> Path:
        return self.directory / "leaves"

    @property
    def lock(self) -> Path:
        return self.directory / "ca.lock"


def ensure_ca(directory: Path) -> CaFiles:
    """The CA in ``directory``, created (key 0600, directory 0700) if missing (minting
    imports ``cryptography``, so only the first use of a data root pays for it)."""
    files = CaFiles(directory)
    if files.key.exists() and files.cert.exists():
        return files
    try:
        directory.mkdir(parents=True, exist_ok=True)
        directory.chmod(0o700)
        with locked(files.lock):
            if not (files.key.exists() and files.cert.exists()):
                from impyard.gateway.wiring import mint

                key_pem, cert_pem = mint.new_ca()
                write_private(files.key, key_pem)
                atomic_write_text(files.cert, cert_pem.decode())
                files.cert.chmod(0o644)
    except OSError as exc:
        raise CaError(f"cannot create the TLS-inspection CA in {directory}: {exc}") from exc
    return files


def ca_certificate(directory: Path) -> str:
    """The CA's certificate as PEM (what boxes trust)."""
    return ensure_ca(directory).cert.read_text()


class LeafMinter:
    """Server-side TLS contexts for inspected hosts, signed by the data root's CA."""

    def __init__(self, directory: Path) -> None:
        self.files = ensure_ca(directory)
        self._lock = threading.Lock()
        self._contexts: dict[str, tuple[ssl.SSLContext, datetime.datetime]] = {}

    def context_for(self, host: str) -> ssl.SSLContext:
        """A server context presenting a leaf for ``host`` (HTTP/1.1 only)."""
        now = datetime.datetime.now(datetime.UTC)
        with self._lock:
            cached = self._contexts.get(host)
            if cached is not None and cached[1] - now > RENEW_BEFORE:
                return cached[0]
            path, not_after = self._leaf(host, now)
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.minimum_version = ssl.TLSVersion.TLSv1_2
            context.set_alpn_protocols(["http/1.1"])
            try:
                context.load_cert_chain(path)
            except (OSError, ssl.SSLError) as exc:
                raise CaError(f"cannot load the leaf certificate for {host}: {exc}") from exc
            self._contexts[host] = (context, not_after)
            return context

    def _leaf(self, host: str, now: datetime.datetime) -> tuple[Path, datetime.datetime]:
        from impyard.gateway.wiring import mint

        path = self.files.leaves / f"{_file_name(host)}.pem"
        with contextlib.suppress(OSError, ValueError):
            not_after = mint.not_after(path.read_bytes())
            if not_after - now > RENEW_BEFORE:
                return path, not_after
        try:
            pem, not_after = mint.leaf(self.files.key, self.files.cert, host, now, LEAF_DAYS)
        except (OSError, ValueError, TypeError) as exc:
            raise CaError(
                f"cannot read the inspection CA in {self.files.directory}: {exc}"
            ) from exc
        try:
            self.files.leaves.mkdir(mode=0o700, exist_ok=True)
            write_private(path, pem)
        except OSError as exc:
            raise CaError(f"cannot store the leaf certificate for {host}: {exc}") from exc
        return path, not_after


def write_private(path: Path, data: bytes) -> None:
    """Write ``data`` readable by the host user only, atomically and durably."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _file_name(host: str) -> str:
    # Hosts are already normalized by the rules (lowercase names or IP literals); colons of
    # IPv6 literals are not welcome in file names.
    return host.replace(":", "_")
