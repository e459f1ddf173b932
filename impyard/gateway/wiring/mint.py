"""Certificates for TLS inspection, made with ``cryptography``: the data root's CA and the
short-lived leaves it signs per host.

Kept apart from ``ca`` (which stores and caches them) because ``cryptography`` costs
~20 ms to import and only minting needs it: a run reads the CA's certificate as a
file, and a gateway mints a leaf only when a box first opens an inspected tunnel to a
host without one.
"""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_DAYS = 3650
# Clocks of clients and host may disagree a little.
BACKDATE = datetime.timedelta(hours=1)


def new_ca() -> tuple[bytes, bytes]:
    """A new CA: its private key and its certificate, both PEM."""
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
    return _key_pem(key), cert.public_bytes(serialization.Encoding.PEM)


def not_after(pem: bytes) -> datetime.datetime:
    """When the first certificate in ``pem`` expires (ValueError: not a certificate)."""
    return x509.load_pem_x509_certificate(pem).not_valid_after_utc


def leaf(
    ca_key_file: Path, ca_cert_file: Path, host: str, now: datetime.datetime, days: int
) -> tuple[bytes, datetime.datetime]:
    """A server leaf for ``host`` signed by the CA: certificate and key as one PEM, and its
    end. OSError/ValueError: the CA cannot be read; TypeError: its key is not EC."""
    ca_key = serialization.load_pem_private_key(ca_key_file.read_bytes(), None)
    ca_cert = x509.load_pem_x509_certificate(ca_cert_file.read_bytes())
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise TypeError(f"{ca_key_file} is not the inspection CA's EC key")
    key = ec.generate_private_key(ec.SECP256R1())
    end = now + datetime.timedelta(days=days)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(host))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(end)
        .add_extension(x509.SubjectAlternativeName([_san(host)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(cert_sign=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .sign(ca_key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM) + _key_pem(key), end


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
