"""A small HTTPS server on host loopback with its own CA (an owner's internal service).

The CA's certificate goes to policy ``box.extra_ca_file``; the box must verify
the server with it (never ``-k``). The server listens on 127.0.0.2: the whole
of 127/8 is loopback on Linux, and a box sends 127.0.0.1 (its own loopback,
the gateway) direct but anything else through the gateway, which connects
from the host.
"""

from __future__ import annotations

import datetime
import ipaddress
import ssl
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

HOST = "127.0.0.2"


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def make_ca_and_leaf(directory: Path, ip: str = HOST) -> tuple[Path, Path, Path]:
    """Write ``ca.pem``, ``leaf.pem`` and ``leaf.key`` (leaf valid for ``ip``) to ``directory``."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name("Impyard test internal CA"))
        .issuer_name(_name("Impyard test internal CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    leaf_key = ec.generate_private_key(ec.SECP256R1())
    leaf = (
        x509.CertificateBuilder()
        .subject_name(_name(ip))
        .issuer_name(ca.subject)
        .public_key(leaf_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(ip))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    directory.mkdir(parents=True, exist_ok=True)
    ca_path, leaf_path, key_path = (
        directory / "ca.pem",
        directory / "leaf.pem",
        directory / "leaf.key",
    )
    ca_path.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    leaf_path.write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        leaf_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return ca_path, leaf_path, key_path


@dataclass
class TlsPageServer:
    """Serves ``pages`` (path -> body) over HTTPS on ``HOST`` with a leaf of its own CA."""

    directory: Path
    pages: dict[str, bytes]
    requests: list[tuple[str, str]] = field(default_factory=list)
    #: Request body bytes POSTs delivered.
    uploaded: int = 0
    _server: ThreadingHTTPServer | None = None

    @property
    def ca_file(self) -> Path:
        return self.directory / "ca.pem"

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.server_address[1])

    def url(self, path: str) -> str:
        return f"https://{HOST}:{self.port}{path}"

    def __enter__(self) -> TlsPageServer:
        _ca, leaf, key = make_ca_and_leaf(self.directory)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(leaf, key)
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                del format, args

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                outer.requests.append((self.command, self.path))
                outer.uploaded += len(body)
                self.send_response(200)
                self.send_header("Content-Length", "3")
                self.end_headers()
                self.wfile.write(b"ok\n")

            def do_GET(self) -> None:
                outer.requests.append((self.command, self.path))
                body = outer.pages.get(self.path)
                self.send_response(200 if body is not None else 404)
                payload = body if body is not None else b"not found\n"
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        server = ThreadingHTTPServer((HOST, 0), Handler)
        server.socket = context.wrap_socket(server.socket, server_side=True)
        server.daemon_threads = True
        self._server = server
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
