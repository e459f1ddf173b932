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
import ipaddress
import os
import ssl
import threading
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from impyard.errors import ImpyardError
from impyard.fsutil import atomic_write_text, locked

CA_DAYS = 3650
LEAF_DAYS = 7
RENEW_BEFORE = datetime.timedelta(days=1)
# Clocks of clients and host may disagree a little.
BACKDATE = datetime.timedelta(hours=1)


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
    """The CA in ``directory``, created (key 0600, directory 0700) if missing."""
    files = CaFiles(directory)
    if files.key.exists() and files.cert.exists():
        return files
    try:
        directory.mkdir(parents=True, exist_ok=True)
        directory.chmod(0o700)
        with locked(files.lock):
            if not (files.key.exists() and files.cert.exists()):
                _create_ca(files)
    except OSError as exc:
        raise CaError(f"cannot create the TLS-inspection CA in {directory}: {exc}") from exc
    return files


def ca_certificate(directory: Path) -> str:
    """The CA's certificate as PEM (what boxes trust)."""
    return ensure_ca(directory).cert.read_text()


def _create_ca(files: CaFiles) -> None:
    now = datetime.datetime.now(datetime.UTC)
    key = ec.generate_private_key(ec.SECP256R1())
    name = _name("Impyard gateway inspection CA")
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + datetime.timedelta(days=CA_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(cert_sign=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
        .sign(key, hashes.SHA256())
    )
    _write_private(files.key, _key_pem(key))
    atomic_write_text(files.cert, cert.public_bytes(serialization.Encoding.PEM).decode())
    files.cert.chmod(0o644)


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
        path = self.files.leaves / f"{_file_name(host)}.pem"
        with contextlib.suppress(OSError, ValueError):
            cert = x509.load_pem_x509_certificate(path.read_bytes())
            if cert.not_valid_after_utc - now > RENEW_BEFORE:
                return path, cert.not_valid_after_utc
        return path, self._mint(host, path, now)

    def _mint(self, host: str, path: Path, now: datetime.datetime) -> datetime.datetime:
        try:
            ca_key = serialization.load_pem_private_key(self.files.key.read_bytes(), None)
            ca_cert = x509.load_pem_x509_certificate(self.files.cert.read_bytes())
        except (OSError, ValueError) as exc:
            raise CaError(
                f"cannot read the inspection CA in {self.files.directory}: {exc}"
            ) from exc
        if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
            raise CaError(f"{self.files.key} is not the inspection CA's EC key")
        key = ec.generate_private_key(ec.SECP256R1())
        not_after = now + datetime.timedelta(days=LEAF_DAYS)
        cert = (
            x509.CertificateBuilder()
            .subject_name(_name(host))
            .issuer_name(ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - BACKDATE)
            .not_valid_after(not_after)
            .add_extension(x509.SubjectAlternativeName([_san(host)]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_key_usage(cert_sign=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
            )
            .sign(ca_key, hashes.SHA256())
        )
        pem = cert.public_bytes(serialization.Encoding.PEM) + _key_pem(key)
        try:
            self.files.leaves.mkdir(mode=0o700, exist_ok=True)
            _write_private(path, pem)
        except OSError as exc:
            raise CaError(f"cannot store the leaf certificate for {host}: {exc}") from exc
        return not_after


def _write_private(path: Path, data: bytes) -> None:
    """Write ``data`` readable by the host user only, atomically and durably."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common[:64])])


def _san(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def _file_name(host: str) -> str:
    # Hosts are already normalized by the rules (lowercase names or IP literals); colons of
    # IPv6 literals are not welcome in file names.
    return host.replace(":", "_")


def _key_usage(*, cert_sign: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=cert_sign,
        crl_sign=cert_sign,
        encipher_only=False,
        decipher_only=False,
    )
