"""The cluster token: the one credential of the cluster API. Made on first use, kept mode
0600 in the data root, handed to the nodes as a Swarm secret by ``cluster deploy``."""

from __future__ import annotations

import hmac
import secrets

from impyard.common.fsutil import atomic_write_bytes
from impyard.home import Home


def cluster_token(home: Home) -> str:
    path = home.cluster_dir / "token"
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        pass
    path.parent.mkdir(mode=0o700, exist_ok=True)
    atomic_write_bytes(path, (secrets.token_urlsafe(32) + "\n").encode(), mode=0o600)
    return path.read_text().strip()


def token_matches(expected: str, header: str | None) -> bool:
    """Whether an ``Authorization`` header carries ``expected`` (constant time)."""
    given = (header or "").removeprefix("Bearer ").strip()
    return bool(given) and hmac.compare_digest(given.encode(), expected.encode())
