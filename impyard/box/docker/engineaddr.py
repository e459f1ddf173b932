"""Where the engine listens: ``DOCKER_HOST`` parsed the way the docker CLI does, TLS from
``DOCKER_TLS_VERIFY``/``DOCKER_CERT_PATH``, and the connection to a unix socket."""

from __future__ import annotations

import http.client
import os
import socket
import ssl
import urllib.parse
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Endpoint:
    """Where the engine listens, parsed from ``DOCKER_HOST`` the way the CLI does."""

    url: str
    socket_path: str | None = None
    host: str = "localhost"
    port: int = 2375
    tls: ssl.SSLContext | None = None

    @classmethod
    def parse(cls, url: str) -> Endpoint:
        if url.startswith("unix://"):
            return cls(url, socket_path=url[len("unix://") :])
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("tcp", "http", "https") or not parts.hostname:
            raise ValueError(f"unsupported engine address {url!r} (unix:// or tcp:// only)")
        tls = _tls_from_env() if parts.scheme != "http" else None
        if parts.scheme == "https" and tls is None:
            tls = ssl.create_default_context()
        default_port = 2376 if tls is not None else 2375
        return cls(url, host=parts.hostname, port=parts.port or default_port, tls=tls)


def _tls_from_env() -> ssl.SSLContext | None:
    """TLS as the docker CLI configures it: ``DOCKER_TLS_VERIFY`` and ``DOCKER_CERT_PATH``."""
    if not os.environ.get("DOCKER_TLS_VERIFY") and not os.environ.get("DOCKER_TLS"):
        return None
    certs = Path(os.environ.get("DOCKER_CERT_PATH") or Path.home() / ".docker")
    context = ssl.create_default_context()
    if os.environ.get("DOCKER_TLS_VERIFY"):
        context.load_verify_locations(certs / "ca.pem")
    else:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if (certs / "cert.pem").exists():
        context.load_cert_chain(certs / "cert.pem", certs / "key.pem")
    return context


class UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.timeout)
            sock.connect(self._path)
        except BaseException:
            sock.close()
            raise
        self.sock = sock
