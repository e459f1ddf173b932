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

import shutil
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from impyard.box import engine
from impyard.box.spec import TMP_TMPFS
from impyard.errors import EngineError, ImpyardError

if TYPE_CHECKING:
    from impyard.home import Home
    from impyard.settings import Settings

TMP_SIZE_BYTES = 2147483648

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


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str


@dataclass
class CheckReport:
    image: str
    checks: list[Check] = field(default_factory=list)
    checkout: str = "copy"

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
            "ok": self.ok,
        }


class CheckRunError(EngineError):
    """The check box could not be run at all (not: a check failed)."""

    def __init__(self, image: str, exit_code: int, stderr: str) -> None:
        tail = " | ".join(line for line in stderr.strip().splitlines()[-3:] if line.strip())
        super().__init__(
            f"could not run the check box from {image} (docker exit {exit_code}): {tail}"
        )
        self.image = image
        self.exit_code = exit_code
        self.stderr_tail = tail


class CheckFailedError(ImpyardError):
    def __init__(self, report: CheckReport) -> None:
        failed = report.failed()
        reasons = "; ".join(f"{c.name}: {c.detail}" for c in failed)
        super().__init__(
            f"{len(failed)} of {len(report.checks)} box checks failed on {report.image}: {reasons}"
        )
        self.report = report


def _run_sh(image: str, script: str) -> dict[str, str]:
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
            remove=True,
            pull="never",  # nothing can be pulled here; also saves an image inspect
            stream=True,
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
    name = "size is 2 GiB"
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
        Check(
            "mounted nosuid,nodev",
            bool(options) and not missing,
            line or "no /tmp entry in /proc/mounts",
        ),
        Check("mode 1777", mode == "1777", f"/tmp mode {mode or '?'}"),
    ]


def _checkout_row(settings: Settings, home: Home, image: str) -> tuple[str, Check]:
    from impyard.box.volumes import select_checkout_kind

    kind = select_checkout_kind(settings, home, image)
    if settings.checkout != "auto":
        detail = f"{kind} (forced by IMPYARD_CHECKOUT={settings.checkout})"
    elif kind == "overlay":
        detail = "overlay volumes available"
    else:
        detail = "overlay volumes unavailable on this engine/data root: copy fallback"
    return kind, Check("checkout kind (info)", True, detail)


def check_box(image: str, settings: Settings, home: Home) -> CheckReport:
    """Run the primitive and return every check; raises only when it cannot run at all."""
    if shutil.which("docker") is None:
        # python-on-whales would otherwise try to download a docker CLI.
        raise EngineError("the docker CLI is not on PATH: install docker.io (`just engine`)")
    # One SDK round trip first: a missing image or an unreachable engine gets
    # the same one-line reason as every other Impyard command.
    engine.call("image inspect", engine.api().inspect_image, image, image=image)

    facts = _run_sh(image, PROBE_SCRIPT)
    report = CheckReport(image=image)
    fstype = facts.get("fstype", "")
    report.checks.append(Check("filesystem is tmpfs", fstype == "tmpfs", f"/tmp is {fstype!r}"))
    report.checks.append(_size_check(facts))
    probe = facts.get("probe", "")
    report.checks.append(Check("probe reads back ok", probe == "ok", f"read {probe!r}"))
    report.checks.extend(_mount_checks(facts))
    again = _run_sh(image, SECOND_SCRIPT).get("again", "")
    report.checks.append(
        Check(
            "second box does not see /tmp/probe",
            again == "absent",
            "gone with --rm" if again == "absent" else f"/tmp/probe is {again or 'unknown'}",
        )
    )
    scratch = facts.get("scratch", "")
    report.checks.append(
        Check(
            "no /opt/impyard/scratch",
            scratch == "absent",
            f"/opt/impyard/scratch {scratch or 'unknown'}",
        )
    )
    report.checkout, row = _checkout_row(settings, home, image)
    report.checks.append(row)
    return report
