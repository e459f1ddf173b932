"""``impyard check box``: the tmpfs container primitive, verified with the real CLI.

Runs, through python-on-whales (so exactly what an operator would type), the
equivalent of::

    docker run --rm --entrypoint /bin/sh \\
      --tmpfs /tmp:rw,nosuid,nodev,size=2147483648,mode=1777 <image> \\
      -lc 'echo ok >/tmp/probe; stat -f -c %T /tmp; df -h /tmp; cat /tmp/probe; ...'

and a second box from the same image looking for ``/tmp/probe``. Every fact is
read from inside the box.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from impyard.box.checks.check_isolation import (
    GVISOR_INFO_ROW,
    GVISOR_TMP_PROBE,
    GVISOR_TMP_ROW,
    gvisor_info_rows,
    gvisor_tmp_row,
    network_row_names,
    network_rows,
)
from impyard.box.checks.checkrow import Check, CheckRunError
from impyard.box.docker import engine
from impyard.box.docker.runtime import require_runtime
from impyard.box.launcher.helpers import helper_labels, holding
from impyard.box.spec import TMP_TMPFS
from impyard.box.watch.tmpwatch import gib
from impyard.common.contract import TMP_SIZE_BYTES
from impyard.common.errors import EngineError, ImpyardError

if TYPE_CHECKING:
    from impyard.home import Home
    from impyard.settings import Settings


# Each fact on its own tagged line so the parse does not depend on the order
# or on what df prints. The commands of the documented primitive come first.
PROBE_SCRIPT = """\
echo ok >/tmp/probe
echo "@fstype $(stat -f -c %T /tmp)"
echo "@blocks $(stat -f -c '%b %S' /tmp)"
echo "@df $(df -h /tmp | tail -n 1)"
echo "@probe $(cat /tmp/probe)"
echo "@mount $(grep ' /tmp ' /proc/mounts)"
echo "@mode $(stat -c %a /tmp)"
if [ -e /opt/impyard/scratch ]; then echo "@scratch present"; else echo "@scratch absent"; fi
"""
SECOND_SCRIPT = 'if [ -e /tmp/probe ]; then echo "@again present"; else echo "@again absent"; fi'

#: Row names (``row_names`` lists them in order).
TMP_ROWS = ("filesystem is tmpfs", "size is 2 GiB", "probe reads back ok")
MOUNT_ROW, MODE_ROW = "mounted nosuid,nodev", "mode 1777"
SECOND_ROW, SCRATCH_ROW = "second box does not see /tmp/probe", "no /opt/impyard/scratch"
CHECKOUT_ROW, SPACE_ROW = "checkout kind (info)", "run write limit (info)"


@dataclass
class CheckReport:
    image: str
    checks: list[Check] = field(default_factory=list)
    checkout: str = "copy"
    runtime: str = "runc"
    #: Told each row as its check finishes: a whole run takes 6-12 s.
    on_check: Callable[[Check], None] | None = field(default=None, repr=False, compare=False)

    def add(self, *checks: Check) -> None:
        for check in checks:
            self.checks.append(check)
            if self.on_check is not None:
                self.on_check(check)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def failed(self) -> list[Check]:
        return [c for c in self.checks if not c.ok]

    def to_json(self) -> dict[str, Any]:
        return {
            "image": self.image,
            "checks": [asdict(c) for c in self.checks],
            "checkout": self.checkout,
            "runtime": self.runtime,
            "ok": self.ok,
        }


class CheckFailedError(ImpyardError):
    def __init__(self, report: CheckReport) -> None:
        failed = report.failed()
        reasons = "; ".join(f"{c.name}: {c.detail}" for c in failed)
        super().__init__(
            f"{len(failed)} of {len(report.checks)} box checks failed on {report.image}: {reasons}"
        )
        self.report = report


def _run_sh(image: str, script: str, runtime: str, labels: dict[str, str]) -> dict[str, str]:
    """Run ``script`` in a throwaway ``--rm`` box; return its ``@key value`` lines."""
    from python_on_whales import DockerClient
    from python_on_whales.exceptions import DockerException, NoSuchImage

    lines: list[tuple[str, bytes]] = []
    try:
        for source, line in DockerClient().run(
            image,
            ["-lc", script],
            entrypoint="/bin/sh",
            tmpfs=[f"/tmp:{TMP_TMPFS}"],
            runtime=runtime,
            remove=True,
            pull="never",  # nothing can be pulled here; also saves an image inspect
            stream=True,
            labels=labels,
        ):
            lines.append((source, line))
    except NoSuchImage as exc:
        raise engine.BoxImageNotFoundError(image) from exc
    except DockerException as exc:
        # 125-127: docker itself failed (engine, image, entrypoint); any other
        # status came from the script, whose output we still judge below.
        if exc.return_code in (125, 126, 127) or not any(s == "stdout" for s, _ in lines):
            raise CheckRunError(image, exc.return_code, exc.stderr or "") from exc
    facts: dict[str, str] = {}
    for source, raw in lines:
        text = raw.decode(errors="replace").rstrip("\n")
        if source == "stdout" and text.startswith("@"):
            key, _, value = text[1:].partition(" ")
            facts[key] = value.strip()
    return facts


def _size_check(facts: dict[str, str]) -> Check:
    name = TMP_ROWS[1]
    try:
        blocks, block_size = (int(x) for x in facts.get("blocks", "").split())
    except ValueError:
        return Check(name, False, f"could not read the size of /tmp ({facts.get('blocks')!r})")
    size = blocks * block_size
    df = " ".join(facts.get("df", "").split())
    return Check(name, size == TMP_SIZE_BYTES, f"{size} bytes ({df})" if df else f"{size} bytes")


def _mount_checks(facts: dict[str, str]) -> list[Check]:
    line = facts.get("mount", "")
    fields = line.split()
    options = set(fields[3].split(",")) if len(fields) >= 4 else set()
    mode = facts.get("mode", "")
    missing = {"nosuid", "nodev"} - options
    return [
        Check(MOUNT_ROW, bool(options) and not missing, line or "no /tmp entry in /proc/mounts"),
        Check(MODE_ROW, mode == "1777", f"/tmp mode {mode or '?'}"),
    ]


FILL_CHECK = "a full /tmp fits box.memory_bytes"
#: What the fill check writes: a full /tmp, short of the last few pages tmpfs keeps.
FILL_MIB = TMP_SIZE_BYTES // 2**20 - 8
FILL_SCRIPT = (
    f"dd if=/dev/zero of=/tmp/fill bs=1048576 count={FILL_MIB} 2>/dev/null; "
    'echo "@dd $?"; echo "@filled $(stat -c %s /tmp/fill)"'
)


def _fill_check(image: str, memory_bytes: int, runtime: str, labels: dict[str, str]) -> Check:
    """Fill /tmp under the box memory limit: tmpfs pages are charged to the box, so a limit
    below the size of /tmp means a box that fills it is OOM-killed, not told "disk full"."""
    from python_on_whales import DockerClient
    from python_on_whales.exceptions import DockerException

    name = FILL_CHECK
    facts: dict[str, str] = {}
    try:
        output = DockerClient().run(
            image,
            ["-c", FILL_SCRIPT],
            entrypoint="/bin/sh",
            tmpfs=[f"/tmp:{TMP_TMPFS}"],
            memory=memory_bytes,
            memory_swap=memory_bytes,
            runtime=runtime,
            remove=True,
            pull="never",
            labels=labels,
        )
        killed = False
    except DockerException as exc:
        if exc.return_code != 137:
            raise CheckRunError(image, exc.return_code, exc.stderr or "") from exc
        output, killed = exc.stdout or "", True
    for line in str(output).splitlines():
        key, _, value = line.removeprefix("@").partition(" ")
        facts[key] = value.strip()
    # The OOM killer picks a process: dd (status 137) or the whole box.
    killed = killed or facts.get("dd") == "137"
    written = int(facts["filled"]) if facts.get("filled", "").isdigit() else 0
    if killed:
        return Check(
            name,
            False,
            f"OOM-killed after writing {written // 2**20} MiB to /tmp: box.memory_bytes "
            f"({gib(memory_bytes)}) is smaller than a full /tmp ({gib(TMP_SIZE_BYTES)}); files in "
            "/tmp are memory and count against it",
        )
    if facts.get("dd") != "0" or written != FILL_MIB * 2**20:
        return Check(
            name,
            False,
            f"could not fill /tmp (dd status {facts.get('dd', '?')}, {written} bytes written)",
        )
    left = memory_bytes - written
    return Check(
        name,
        True,
        f"wrote {FILL_MIB} MiB to /tmp under the {gib(memory_bytes)} limit; {gib(left)} left for "
        "the agent",
    )


def _checkout_row(settings: Settings, home: Home, image: str) -> tuple[str, Check]:
    from impyard.box.launcher.volumes import select_checkout_kind

    kind = select_checkout_kind(settings, home, image)
    if settings.checkout != "auto":
        detail = f"{kind} (forced by IMPYARD_CHECKOUT={settings.checkout})"
    elif kind == "overlay":
        detail = "overlay volumes available"
    else:
        detail = "overlay volumes unavailable on this engine/data root: copy fallback"
    return kind, Check(CHECKOUT_ROW, True, detail)


def _space_row(settings: Settings) -> Check:
    from impyard.common.loopspace import loop_supported

    unsupported = loop_supported() if settings.run_space != "plain" else "IMPYARD_RUN_SPACE=plain"
    if unsupported is None:
        detail = "a size-limited loop filesystem per run (knowledge.max_repo_bytes + overhead)"
    else:
        detail = f"unbounded while a run runs ({unsupported}); admission keeps the reserve"
    return Check(SPACE_ROW, True, detail)


def row_names(runtime: str) -> list[str]:
    """The names of the rows ``check_box`` gives under ``runtime``, in order, known before
    any box runs (so rows printed as they come can be aligned)."""
    gvisor = runtime == "runsc"
    return [
        *TMP_ROWS,
        GVISOR_TMP_ROW if gvisor else MOUNT_ROW,
        MODE_ROW,
        SECOND_ROW,
        SCRATCH_ROW,
        FILL_CHECK,
        CHECKOUT_ROW,
        *network_row_names(runtime),
        *([GVISOR_INFO_ROW] if gvisor else []),
        SPACE_ROW,
    ]


def check_box(
    image: str,
    settings: Settings,
    home: Home,
    memory_bytes: int,
    runtime: str = "runc",
    on_check: Callable[[Check], None] | None = None,
) -> CheckReport:
    """Run the primitive and return every check; raises only when it cannot run at all.

    ``memory_bytes`` is the box memory limit runs use (policy ``box.memory_bytes``);
    ``runtime`` the engine runtime the boxes run under (runc or runsc); ``on_check`` is
    told each row as soon as its check finished."""
    if shutil.which("docker") is None:
        # python-on-whales would otherwise try to download a docker CLI.
        raise EngineError("the docker CLI is not on PATH: install docker.io (`just engine`)")
    # One engine round trip first: a missing image or an unreachable engine gets
    # the same one-line reason as every other Impyard command.
    engine.call("image inspect", engine.api().inspect_image, image, image=image)
    require_runtime(runtime)
    report = CheckReport(image=image, runtime=runtime, on_check=on_check)
    # Its boxes are helpers of the data root: a check killed midway leaves them to recovery.
    base = home.root if home.root.is_dir() else Path(tempfile.gettempdir())
    lock = base / f".check-box-{os.getpid()}.lock"
    with holding(lock):
        try:
            labels = helper_labels(base, lock, "check-box", "check-box", "-")
            _checks(report, settings, home, memory_bytes, labels)
        finally:
            with contextlib.suppress(OSError):
                lock.unlink()
    return report


def _checks(
    report: CheckReport, settings: Settings, home: Home, memory_bytes: int, labels: dict[str, str]
) -> None:
    image, runtime = report.image, report.runtime
    gvisor = runtime == "runsc"
    facts = _run_sh(image, PROBE_SCRIPT + (GVISOR_TMP_PROBE if gvisor else ""), runtime, labels)
    fstype = facts.get("fstype", "")
    report.add(Check(TMP_ROWS[0], fstype == "tmpfs", f"/tmp is {fstype!r}"))
    report.add(_size_check(facts))
    probe = facts.get("probe", "")
    report.add(Check(TMP_ROWS[2], probe == "ok", f"read {probe!r}"))
    mount_rows = _mount_checks(facts)
    if gvisor:  # gVisor's /proc/mounts lists no nosuid,nodev: what they prevent is tried
        mount_rows[0] = gvisor_tmp_row(facts)
    report.add(*mount_rows)
    scratch = facts.get("scratch", "")
    again = _run_sh(image, SECOND_SCRIPT, runtime, labels).get("again", "")
    report.add(
        Check(
            SECOND_ROW,
            again == "absent",
            "gone with --rm" if again == "absent" else f"/tmp/probe is {again or 'unknown'}",
        ),
        Check(SCRATCH_ROW, scratch == "absent", f"/opt/impyard/scratch {scratch or 'unknown'}"),
    )
    if fstype == "tmpfs":
        report.add(_fill_check(image, memory_bytes, runtime, labels))
    else:  # filling a /tmp on the box's disk would only write 2 GiB to the engine's disk
        report.add(Check(FILL_CHECK, False, "not run: /tmp is not a tmpfs"))
    report.checkout, row = _checkout_row(settings, home, image)
    report.add(row)
    report.add(*network_rows(runtime, labels))
    if gvisor:
        report.add(*gvisor_info_rows())
    report.add(_space_row(settings))
