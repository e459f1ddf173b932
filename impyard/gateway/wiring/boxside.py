"""What the box sees of its gateway: where the ready signal is, and the proxy environment.

Kept apart from ``server`` (sockets, TLS, HTTP parsing, the rules): a run builds its box
spec from these before the box exists, and the server's modules load while the engine
starts the box.
"""

from __future__ import annotations

from pathlib import Path

from impyard.common.fsutil import atomic_write_text

# Where the box sees the host's signal dir, and the file box-init waits for.
BOX_SIGNAL_DIR = "/opt/impyard/signal"
READY_FILE = "gateway.ready"
BOX_READY_PATH = f"{BOX_SIGNAL_DIR}/{READY_FILE}"
WAIT_FOR_ENV = "IMPYARD_WAIT_FOR"
NO_PROXY = "127.0.0.1,localhost,::1"


def proxy_env(port: int) -> dict[str, str]:
    """The environment that makes the gateway on the box's loopback ``port`` its proxy."""
    url = f"http://127.0.0.1:{port}"
    return {
        "HTTP_PROXY": url,
        "HTTPS_PROXY": url,
        "http_proxy": url,
        "https_proxy": url,
        # The box's loopback holds nothing but the gateway, so loopback names go direct:
        # a credential route is a plain request to 127.0.0.1:<port>. Node's undici
        # (EnvHttpProxyAgent) otherwise tunnels even http:// targets with a CONNECT to
        # the gateway itself, which is refused. Lowercase is read first by most clients.
        "NO_PROXY": NO_PROXY,
        "no_proxy": NO_PROXY,
    }


def write_ready(signal_dir: Path) -> Path:
    """Tell the box its gateway is listening: box-init waits for this file before the imp runs."""
    path = signal_dir / READY_FILE
    # A signal to a live box, which waits for it: nothing to keep across a host crash
    # (its box does not outlive the host's run), so no fsync delays the box's start.
    atomic_write_text(path, "ready\n", durable=False)
    path.chmod(0o644)
    return path
