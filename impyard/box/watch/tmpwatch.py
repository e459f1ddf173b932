"""How much of a running box's memory its ``/tmp`` holds.

The box's ``/tmp`` is a tmpfs, and tmpfs pages are charged to the box's memory
cgroup: a box that fills ``/tmp`` is OOM-killed at its memory limit, not at
the 2 GiB of the mount. After an OOM kill the cgroup is gone, so the only way
to tell an owner *why* is to have watched: a thread samples the cgroup's
``shmem`` counter (tmpfs and shared memory) while the box runs. Reading one
small file a few times a second costs nothing measurable.

Works with cgroup v1 (``memory`` controller) and v2 (unified) hierarchies;
where neither can be read the watch simply reports nothing.

Under gVisor (runsc) the box's tmpfs lives in the sandbox's own memory file, a memfd the
sentry also backs every process's memory with: the cgroup's ``shmem`` is then the whole
box (a 300 MiB /tmp read 315 MB, the box's processes included). The watch reports that
figure as it is, and ``oom_reason`` does not blame /tmp alone for it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
#: How often /tmp use is sampled. tmpfs fills at ~2 GB/s at most, so the last
#: sample before a kill is at most a few hundred MB behind.
SAMPLE_SECONDS = 0.1
#: An OOM kill is blamed on /tmp when /tmp held at least this share of the limit.
TMP_SHARE_TO_BLAME = 0.5


def memory_stat_path(pid: int, root: Path = CGROUP_ROOT) -> Path | None:
    """The ``memory.stat`` of ``pid``'s memory cgroup, or None when it cannot be found."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return None
    unified: str | None = None
    for line in lines:
        _hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if "memory" in controllers.split(","):
            return root / "memory" / path.lstrip("/") / "memory.stat"
        if controllers == "":
            unified = path
    if unified is not None:
        return root / unified.lstrip("/") / "memory.stat"
    return None


def read_shmem(stat_path: Path) -> int | None:
    """Bytes of tmpfs/shared memory charged to the cgroup (None: unreadable)."""
    try:
        text = stat_path.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "shmem":
            try:
                return int(value)
            except ValueError:
                return None
    return None


@dataclass(frozen=True)
class TmpUsage:
    last_bytes: int
    peak_bytes: int


class TmpWatch:
    """Samples the box's /tmp use from ``start(pid)`` until ``stop()``."""

    def __init__(self, interval: float = SAMPLE_SECONDS) -> None:
        self._interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last = 0
        self._peak = 0
        self._seen = False

    def start(self, pid: int) -> None:
        path = memory_stat_path(pid)
        if path is None or read_shmem(path) is None:
            return
        self._thread = threading.Thread(
            target=self._sample, args=(path,), name="tmpwatch", daemon=True
        )
        self._thread.start()

    def _sample(self, path: Path) -> None:
        while True:
            value = read_shmem(path)
            if value is None:
                return  # the box is gone
            self._seen = True
            self._last = value
            self._peak = max(self._peak, value)
            if self._stop.wait(self._interval):
                return

    def stop(self) -> TmpUsage | None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2)
        if not self._seen:
            return None
        return TmpUsage(last_bytes=self._last, peak_bytes=self._peak)


def oom_reason(limit_bytes: int, usage: TmpUsage | None, runtime: str = "runc") -> str:
    """What an owner reads when the box was OOM-killed."""
    base = "killed by the out-of-memory killer"
    if usage is None:
        return f"{base} (memory limit {gib(limit_bytes)})"
    held = max(usage.last_bytes, usage.peak_bytes)
    if runtime == "runsc":
        return (
            f"{base}: the box held {gib(held)} of the {gib(limit_bytes)} memory limit (under "
            "gVisor /tmp's files and the processes' memory are one figure; /tmp is memory and "
            "counts against box.memory_bytes)"
        )
    if held >= TMP_SHARE_TO_BLAME * limit_bytes:
        return (
            f"{base}: files in /tmp held {gib(held)} of the {gib(limit_bytes)} memory limit "
            "(/tmp is memory: its files count against box.memory_bytes)"
        )
    return f"{base} (memory limit {gib(limit_bytes)}; /tmp held {gib(held)})"


def gib(value: int) -> str:
    return f"{value / 2**30:.2f} GiB"
