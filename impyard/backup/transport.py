"""How libgit2 talks to backup remotes: bounded waits, credentials, refused updates."""

from __future__ import annotations

import threading

import pygit2
from pygit2.enums import CredentialType

from impyard.common.errors import BackupError
from impyard.knowledge.store.repo import configure_libgit2

#: A remote that never answers must not hold the backup worker (or a flush) for ever.
CONNECT_TIMEOUT_MS = 10_000
IO_TIMEOUT_MS = 120_000

_lock = threading.Lock()
_configured = False


def configure_transport() -> None:
    """Process-wide libgit2 network timeouts (its default is to wait for ever)."""
    global _configured
    with _lock:
        if _configured:
            return
        configure_libgit2()
        pygit2.settings.server_connect_timeout = CONNECT_TIMEOUT_MS
        pygit2.settings.server_timeout = IO_TIMEOUT_MS
        _configured = True


class Callbacks(pygit2.RemoteCallbacks):
    """Credentials from the URL (libgit2 applies a URL's own user and password) or the
    SSH agent, asked once; every reference update the remote refuses, kept by name."""

    def __init__(self) -> None:
        super().__init__()
        self.refused: dict[str, str] = {}
        self._asked = False

    def credentials(
        self, url: str, username_from_url: str | None, allowed_types: CredentialType
    ) -> pygit2.Username | pygit2.KeypairFromAgent:
        # libgit2 asks again after each refusal; a second ask means the first failed.
        if self._asked:
            raise BackupError("the remote refused the credentials (SSH agent key or URL user)")
        self._asked = True
        if allowed_types & CredentialType.USERNAME:
            return pygit2.Username(username_from_url or "git")
        if allowed_types & CredentialType.SSH_KEY:
            return pygit2.KeypairFromAgent(username_from_url or "git")
        raise BackupError(
            "the remote asks for credentials Impyard has none of (put user and password "
            "in the URL, or use ssh with a key in the SSH agent)"
        )

    def push_update_reference(self, refname: str, message: str | None) -> None:
        if message:
            self.refused[refname] = message
