"""Where an imp's backup lives: ``<remote>/<imp>.git`` for each base location.

A base location is a local path, a ``file://`` URL, or any URL libgit2 can push to
(``git://``, ``ssh://``, ``https://``, scp-like ``host:path``). Only local locations
can be created or listed by Impyard; a remote server's ``<imp>.git`` must exist.
"""

from __future__ import annotations

import re
import shutil
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

import pygit2

from impyard.common.errors import BackupError
from impyard.common.names import IMP_NAME, check_imp_name
from impyard.knowledge.store.repo import configure_libgit2

# ``user@host:path`` or ``host:path`` (what git calls scp-like syntax); a drive letter or a
# path with a slash before the colon is a local path.
_SCP_LIKE = re.compile(r"^(?:[^@/:]+@)?[^@/:]+:")


@dataclass(frozen=True)
class Location:
    """One imp's repository at one base location."""

    #: The base as configured (may hold credentials: never shown or journaled).
    base: str
    #: The base without any password, for status.json, the journal and the terminal.
    label: str
    #: What libgit2 is given.
    url: str
    #: The bare repository on this machine, for local locations.
    path: Path | None


def is_url(base: str) -> bool:
    return "://" in base or bool(_SCP_LIKE.match(base))


def local_base(base: str, relative_to: Path) -> Path | None:
    """The directory a local base names (``file://`` or a path), else None."""
    if base.startswith("file://"):
        return Path(urllib.parse.unquote(urllib.parse.urlsplit(base).path))
    if is_url(base):
        return None
    path = Path(base).expanduser()
    return path if path.is_absolute() else relative_to / path


def label(base: str) -> str:
    """``base`` with the password of its userinfo replaced, so it can be shown and stored."""
    if "://" not in base:
        return base
    parts = urllib.parse.urlsplit(base)
    if parts.password is None:
        return base
    user = parts.username or ""
    host = parts.netloc.rsplit("@", 1)[1]
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


def scrub(text: str, base: str) -> str:
    """``text`` (an error from libgit2, say) without the password ``base`` may hold."""
    if "://" not in base:
        return text
    password = urllib.parse.urlsplit(base).password
    return text.replace(password, "***") if password else text


def locate(base: str, imp: str, relative_to: Path) -> Location:
    """Where ``imp`` goes at ``base``; a relative local base is taken from ``relative_to``."""
    check_imp_name(imp)
    if not base.strip():
        raise BackupError("a backup remote is empty")
    local = local_base(base, relative_to)
    if local is not None:
        path = local / f"{imp}.git"
        return Location(base=base, label=label(base), url=str(path), path=path)
    url = base if base.endswith(("/", ":")) else base + "/"
    return Location(base=base, label=label(base), url=f"{url}{imp}.git", path=None)


def ensure_local_repo(location: Location) -> None:
    """Create a local location's bare repository when it is missing (built beside and
    renamed, so a concurrent push never finds half a repository)."""
    path = location.path
    if path is None or (path / "HEAD").is_file():
        return
    configure_libgit2()
    staging = path.with_name(f".{path.name}.creating")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(staging, ignore_errors=True)
        pygit2.init_repository(str(staging), bare=True, initial_head="main")
        shutil.rmtree(staging / "hooks", ignore_errors=True)
        try:
            staging.rename(path)
        except OSError:
            if not (path / "HEAD").is_file():
                raise
    except (OSError, pygit2.GitError) as exc:
        raise BackupError(f"cannot create the backup repository {path}: {exc}") from exc
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def local_imps(base: str, relative_to: Path) -> list[str]:
    """The imps a local base holds (``<imp>.git`` directories); a URL cannot be listed."""
    directory = local_base(base, relative_to)
    if directory is None:
        raise BackupError(
            f"cannot list the imps at {label(base)} (not a local path): name them with --imp"
        )
    if not directory.is_dir():
        raise BackupError(f"no backup at {directory}: not a directory")
    found = []
    for entry in sorted(directory.iterdir()):
        name = entry.name.removesuffix(".git")
        # A stray repository whose name is no imp name is not an imp.
        if entry.name.endswith(".git") and IMP_NAME.fullmatch(name) and (entry / "HEAD").is_file():
            found.append(name)
    return found
