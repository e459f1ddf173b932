"""Where the console listens, and whether it may: loopback by default; any other address
only when the owner says so (``--allow-remote``) and with TLS files, since the session
cookie and the login token would otherwise cross the network in clear text."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path

from impyard.common.errors import UsageError

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8470
DEFAULT_LISTEN = f"{DEFAULT_HOST}:{DEFAULT_PORT}"


@dataclass(frozen=True)
class Listen:
    host: str
    port: int
    tls_cert: Path | None = None
    tls_key: Path | None = None
    #: ``/metrics`` answers without a session (a scraper cannot log in).
    metrics_public: bool = False

    @property
    def tls(self) -> bool:
        return self.tls_cert is not None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'https' if self.tls else 'http'}://{host}:{self.port}"


def parse_address(text: str) -> tuple[str, int]:
    """``HOST:PORT``, ``[V6]:PORT``, ``HOST`` or ``:PORT`` (the defaults fill in)."""
    host, port_text = text, ""
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise UsageError(f"--listen {text!r}: an IPv6 address needs its closing ']'")
        host, rest = text[1:end], text[end + 1 :]
        if rest and not rest.startswith(":"):
            raise UsageError(f"--listen {text!r}: expected [ADDRESS]:PORT")
        port_text = rest[1:]
    elif text.count(":") == 1:
        host, port_text = text.split(":")
    elif text.count(":") > 1:
        raise UsageError(f"--listen {text!r}: write an IPv6 address as [ADDRESS]:PORT")
    host = host or DEFAULT_HOST
    if not port_text:
        return host, DEFAULT_PORT
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise UsageError(f"--listen {text!r}: the port must be a number from 0 to 65535")
    return host, int(port_text)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name other than localhost may resolve anywhere


def checked_listen(
    address: str,
    *,
    allow_remote: bool,
    tls_cert: Path | None,
    tls_key: Path | None,
    metrics_public: bool = False,
) -> Listen:
    """The listener the options ask for, or a UsageError saying in one line why not."""
    host, port = parse_address(address)
    if (tls_cert is None) != (tls_key is None):
        raise UsageError("--tls-cert and --tls-key go together: give both or neither")
    for option, path in (("--tls-cert", tls_cert), ("--tls-key", tls_key)):
        if path is not None and not path.is_file():
            raise UsageError(f"{option} {path}: no such file")
    if not is_loopback(host):
        if not allow_remote:
            raise UsageError(
                f"refusing to listen on {host}, which is not a loopback address: "
                "pass --allow-remote (with --tls-cert and --tls-key) to serve the console "
                "beyond this host"
            )
        if tls_cert is None:
            raise UsageError(
                f"refusing to listen on {host} without TLS: --allow-remote needs "
                "--tls-cert and --tls-key (the token and session would cross the network "
                "in clear text)"
            )
    return Listen(host, port, tls_cert, tls_key, metrics_public)


def login_url(listen: Listen | str, token: str) -> str:
    """What ``impyard web --print-url`` prints, for a listener or a console's base URL:
    opening it logs the browser in."""
    base = listen.url if isinstance(listen, Listen) else listen
    return f"{base}/login?token={token}"
