"""The one user-facing error family.

Core code raises these; only the CLI's single handler prints them. Each carries
a message a person can act on and, where it matters, the evidence behind it.
"""

from __future__ import annotations


class ImpyardError(Exception):
    """An error whose message is fit to show a user as-is (one line, no traceback)."""

    exit_code: int = 1

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class UsageError(ImpyardError):
    """Bad input from the user: an invalid name, a missing option, a bad value."""

    exit_code = 2


class NotFoundError(ImpyardError):
    """A named thing (imp, run, task, image) does not exist."""

    exit_code = 2


class AmbiguousError(UsageError):
    """A short name (a run id prefix) matches more than one thing: the message names the
    first few and counts the rest, ``matches`` holds them all."""

    def __init__(self, message: str, matches: list[str]) -> None:
        super().__init__(message)
        self.matches = matches


class ConfigError(ImpyardError):
    """Settings or policy files are missing, unreadable or invalid."""


class EngineError(ImpyardError):
    """The Docker engine is unreachable or refused a request."""


class ImageNotFoundError(EngineError):
    """The box image is not present locally (nothing can be pulled here)."""


class KnowledgeError(ImpyardError):
    """A knowledge repository operation failed (corrupt repo, missing ref, ...)."""


class BackupError(ImpyardError):
    """A push to a backup remote, or a restore from one, failed or was refused."""


class LeaseHeldError(ImpyardError):
    """The imp's exclusive reorganization lease is held by another run."""

    def __init__(self, imp: str, holder: str) -> None:
        super().__init__(f"imp {imp!r}: the reorganization lease is held by run {holder}")
        self.imp = imp
        self.holder = holder
