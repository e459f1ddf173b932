"""The git CLI as an independent checker, with a fixed identity and no user config."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

GIT_ENV = {
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_AUTHOR_NAME": "Test",
    "GIT_AUTHOR_EMAIL": "test@example.invalid",
    "GIT_COMMITTER_NAME": "Test",
    "GIT_COMMITTER_EMAIL": "test@example.invalid",
}


def git(*args: str | Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    """The git CLI as an independent checker of what the host wrote."""
    env = {**os.environ, **GIT_ENV}
    return subprocess.run(
        ["git", *map(str, args)], capture_output=True, text=True, env=env, check=check
    )
