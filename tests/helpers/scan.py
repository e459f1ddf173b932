"""Where a string rests under a directory, found without Impyard's code: every file's
bytes (a gzip file's inflated too), and every object of every Git repository (``git
cat-file``, packs and loose objects alike, reachable or not), so a purge is judged by
what is on disk."""

from __future__ import annotations

import contextlib
import gzip
import os
import subprocess
import zlib
from pathlib import Path


def holders(root: Path, needle: bytes) -> list[str]:
    """Each file under ``root`` whose bytes hold ``needle``, and each repository whose
    objects do (``<repo> (objects)``), relative to ``root``."""
    found: list[str] = []
    for directory, subdirs, files in os.walk(root):
        here = Path(directory)
        if (here / "objects").is_dir() and (here / "HEAD").is_file():
            objects = subprocess.run(
                ["git", "-C", str(here), "cat-file", "--batch-all-objects", "--batch"],
                capture_output=True,
                check=True,
            ).stdout
            if needle in objects:
                found.append(f"{here.relative_to(root)} (objects)")
        subdirs[:] = [d for d in subdirs if not (here / d).is_symlink()]
        for name in files:
            path = here / name
            if path.is_symlink() or not path.is_file():
                continue
            data = path.read_bytes()
            if data[:2] == b"\x1f\x8b":  # a gzip file (a rotated journal): what it holds
                with contextlib.suppress(OSError, EOFError, zlib.error):
                    data += gzip.decompress(data)
            if needle in data:
                found.append(str(path.relative_to(root)))
    return sorted(found)


def fsck(git_dir: Path) -> str:
    """``git fsck --strict``'s complaints about ``git_dir`` ("" when clean)."""
    done = subprocess.run(
        ["git", "-C", str(git_dir), "fsck", "--strict", "--no-dangling", "--no-progress"],
        capture_output=True,
        text=True,
    )
    return "" if done.returncode == 0 else done.stdout + done.stderr
