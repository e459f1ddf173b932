"""Mounts a docker test left behind: a run space a host process failed to unmount.

A leaked mount under a test's ``tmp_path`` is a product defect (every ending unmounts its
run's space; recovery sweeps what a dead host left), and left in place it also breaks
pytest's own removal of old temporary directories (``EBUSY``) at a later session's end.
"""

from __future__ import annotations

import subprocess
from pathlib import Path


def _unescaped(field: str) -> str:
    """A mountinfo path field with its octal escapes (space, tab, newline, backslash) read."""
    for code in ("\\040", "\\011", "\\012", "\\134"):
        field = field.replace(code, chr(int(code[1:], 8)))
    return field


def mounts_under(root: Path) -> list[str]:
    """Mount points below ``root``, deepest first (the order they unmount in)."""
    prefix = str(root.resolve()) + "/"
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split(" ")
        if len(fields) > 4 and (point := _unescaped(fields[4])).startswith(prefix):
            points.append(point)
    return sorted(points, key=len, reverse=True)


def unmount_all(points: list[str]) -> None:
    """Detach each (lazily: a process may still hold a file there)."""
    for point in points:
        subprocess.run(["umount", "-l", point], capture_output=True, check=False)
