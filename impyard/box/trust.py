"""An owner's extra CA for boxes (policy ``box.extra_ca_file``), copied safely into a run.

Only the certificate blocks of the owner's file reach the box: a PEM file that
also holds a private key (or any other text) never leaks it into the run. The
certificates must parse, so a wrong path fails the run before the box starts
with a message naming the key, instead of as a TLS error deep inside the agent.

In the box the copy is mounted read-only at ``BOX_EXTRA_CA``; box-init appends
it to the image's system bundle at ``BOX_CA_BUNDLE`` on the tmpfs, and the
variables below point OpenSSL, curl, Python and Node at the result.
"""

from __future__ import annotations

import re
import ssl
from pathlib import Path

from impyard.errors import ConfigError
from impyard.fsutil import atomic_write_text

BOX_EXTRA_CA = "/opt/impyard/ca.pem"
BOX_CA_BUNDLE = "/tmp/impyard-ca-bundle.pem"
SYSTEM_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
MAX_CA_FILE_BYTES = 1024 * 1024

_CERTIFICATE = re.compile(
    r"-----BEGIN CERTIFICATE-----\r?\n[A-Za-z0-9+/=\r\n]+?-----END CERTIFICATE-----"
)


def extra_ca_env() -> dict[str, str]:
    """Environment that makes the common TLS stacks trust the system roots plus the extra CA."""
    return {
        "IMPYARD_EXTRA_CA": BOX_EXTRA_CA,
        "SSL_CERT_FILE": BOX_CA_BUNDLE,
        "CURL_CA_BUNDLE": BOX_CA_BUNDLE,
        "REQUESTS_CA_BUNDLE": BOX_CA_BUNDLE,
        # Node adds these to its own built-in roots.
        "NODE_EXTRA_CA_CERTS": BOX_EXTRA_CA,
    }


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


def copy_extra_ca(source: Path, destination: Path) -> None:
    """Write the certificates of ``source`` to ``destination`` (readable by the box user)."""
    atomic_write_text(destination, certificates_of(source))
    destination.chmod(0o644)
