"""What a box trusts: one CA bundle, built by the host and mounted read-only.

The bundle is the image's own system roots (read once per image id from the
image and cached), the data root's TLS-inspection CA certificate when
``gateway.inspect_tls`` is on, and the certificate blocks of the owner's
``box.extra_ca_file``. Only certificate blocks of the owner's file reach the box:
a PEM file that also holds a private key (or any other text) never leaks it
into the run, and the certificates must parse, so a wrong path fails the run
before the box starts with a message naming the key. The inspection CA's key
never leaves the host.

Every TLS stack agents use is pointed at the bundle (``BUNDLE_ENV``): OpenSSL,
curl, Python requests, Node, git, pip and npm.
"""

from __future__ import annotations

import hashlib
import os
import re
import ssl
from pathlib import Path

from impyard.common.errors import ConfigError
from impyard.common.fsutil import atomic_write_text

BOX_CA_BUNDLE = "/opt/impyard/ca-bundle.pem"
#: Where images keep their system roots (Debian/Ubuntu/Alpine, Fedora/RHEL, others).
IMAGE_ROOT_PATHS = (
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/cert.pem",
)
MAX_CA_FILE_BYTES = 1024 * 1024
MAX_IMAGE_ROOTS_BYTES = 8 * 1024 * 1024
#: Every variable a TLS stack in the box reads its trust from (Node adds the file to its
#: own built-in roots).
BUNDLE_ENV = (
    "SSL_CERT_FILE",
    "CURL_CA_BUNDLE",
    "REQUESTS_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
    "GIT_SSL_CAINFO",
    "PIP_CERT",
    "npm_config_cafile",
)

_CERTIFICATE = re.compile(
    r"-----BEGIN CERTIFICATE-----\r?\n[A-Za-z0-9+/=\r\n]+?-----END CERTIFICATE-----"
)


def bundle_env() -> dict[str, str]:
    """Environment that points every common TLS stack at the box's bundle."""
    return dict.fromkeys(BUNDLE_ENV, BOX_CA_BUNDLE)


def certificates_of(source: Path) -> str:
    """The certificate blocks of the owner's PEM file (ConfigError when there are none)."""
    where = f"box.extra_ca_file {source}"
    try:
        with source.open("rb") as handle:
            data = handle.read(MAX_CA_FILE_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read it ({exc.strerror or exc})") from exc
    if len(data) > MAX_CA_FILE_BYTES:
        raise ConfigError(f"{where}: larger than {MAX_CA_FILE_BYTES} bytes")
    blocks = _CERTIFICATE.findall(data.decode("ascii", errors="replace"))
    if not blocks:
        raise ConfigError(f"{where}: no PEM certificate (-----BEGIN CERTIFICATE-----) in it")
    text = "\n".join(block.replace("\r\n", "\n") for block in blocks) + "\n"
    try:
        ssl.create_default_context(cadata=text)
    except (ssl.SSLError, ValueError) as exc:
        raise ConfigError(f"{where}: a certificate does not parse ({exc})") from exc
    return text


def write_box_bundle(
    destination: Path,
    image_roots: str,
    *,
    inspection_ca: str | None,
    extra_ca_file: Path | None,
    shared_dir: Path | None = None,
) -> bool:
    """Write the box's bundle (readable by the box user); False, writing nothing, when the
    box trusts only its image's roots anyway (no inspection, no extra CA).

    With ``shared_dir``, a bundle is written (and synced) once per content there, and
    ``destination`` is a hard link to it: runs of one image under one CA share it, and a
    run does not write and sync a few hundred KiB of roots. The box mounts it read-only."""
    if inspection_ca is None and extra_ca_file is None:
        return False
    parts = [image_roots.strip()] if image_roots.strip() else []
    if inspection_ca is not None:
        parts.append(inspection_ca.strip())
    if extra_ca_file is not None:
        parts.append(certificates_of(extra_ca_file).strip())
    text = "\n".join(parts) + "\n"
    if shared_dir is None:
        _write_readable(destination, text)
        return True
    shared = shared_dir / f"{hashlib.sha256(text.encode()).hexdigest()}.pem"
    if not shared.exists():
        shared_dir.mkdir(parents=True, exist_ok=True)
        _write_readable(shared, text)
    destination.unlink(missing_ok=True)
    try:
        os.link(shared, destination)
    except OSError:  # another filesystem, or links refused: a copy of its own
        _write_readable(destination, text)
    return True


def _write_readable(path: Path, text: str) -> None:
    atomic_write_text(path, text)
    path.chmod(0o644)
