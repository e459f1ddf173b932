"""Whether this host can give runs loop-mounted spaces: a host capability, asked by the
run's admission (knowledge) and reported by ``check box`` (the launcher, which knows no
git), so it belongs to neither."""

from __future__ import annotations

import os
import shutil
from pathlib import Path


def loop_supported() -> str | None:
    """None when runs get loop-mounted spaces here, else why not."""
    if os.geteuid() != 0:
        return "not running as root (loop mounts need it)"
    missing = [tool for tool in ("mkfs.ext4", "mount", "umount") if shutil.which(tool) is None]
    if missing:
        return f"{', '.join(missing)} not found"
    if not Path("/dev/loop-control").exists():
        return "no /dev/loop-control"
    return None
