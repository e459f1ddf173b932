"""The console's access token: one secret per data root, in a file only its owner reads.

Created by ``impyard init`` (and by the first ``impyard web`` on a data root made before
the console existed) with ``O_EXCL`` and mode 0600, so it is never readable by anyone
else, not even for the moment between creating and chmod-ing it.
"""

from __future__ import annotations

import hmac
import os
import secrets
from pathlib import Path

from impyard.common.errors import UsageError

#: Bytes of randomness in a token (43 URL-safe characters).
TOKEN_BYTES = 32


def ensure_token(path: Path) -> str:
    """The token at ``path``, created first when there is none."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        return read_token(path)
    token = secrets.token_urlsafe(TOKEN_BYTES)
    try:
        os.write(fd, (token + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    return token


def read_token(path: Path) -> str:
    try:
        # Never follows a link someone left in the owner's data root.
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise UsageError(f"cannot read the console token {path}: {exc.strerror}") from exc
    try:
        token = os.read(fd, 1024).decode("ascii", errors="replace").strip()
    finally:
        os.close(fd)
    if len(token) < 32:
        raise UsageError(f"the console token {path} is too short: remove it to make a new one")
    return token


def token_matches(expected: str, given: str) -> bool:
    """Constant time, so the comparison tells nothing about how much of a guess was right."""
    return hmac.compare_digest(expected.encode(), given.encode())
