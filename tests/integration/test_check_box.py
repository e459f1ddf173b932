"""`impyard check box` against the real engine: passing, and each failure mode."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.cli import Cli
from tests.helpers.git import GIT_ENV
from tests.helpers.images import BOX_IMAGE
from tests.helpers.policy import edit_org
from tests.helpers.runtime import TEST_RUNTIME

pytestmark = pytest.mark.docker

COMMON_CHECKS = {
    "filesystem is tmpfs",
    "size is 2 GiB",
    "probe reads back ok",
    "mode 1777",
    "second box does not see /tmp/probe",
    "no /opt/impyard/scratch",
    "a full /tmp fits box.memory_bytes",
    "checkout kind (info)",
    "the gateway is reachable and nothing else is",
    "no capabilities inside",
    "run write limit (info)",
}
CHECKS_BY_RUNTIME = {
    "runc": COMMON_CHECKS | {"mounted nosuid,nodev", "seccomp filters the box's system calls"},
    "runsc": COMMON_CHECKS
    | {
        "no setuid or device files in /tmp (gVisor)",
        "kernel is gVisor",
        "system calls meet gVisor, which is seccomp-filtered (gVisor)",
        "/tmp usage and OOM kills (info)",
    },
}
CHECKS = CHECKS_BY_RUNTIME[TEST_RUNTIME]
#: Every check box below runs under the runtime the suite runs under.
RT = ("--runtime", TEST_RUNTIME)


def _one_line_error(stderr: str) -> str:
    assert "Traceback" not in stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert lines[0].startswith("impyard: error: "), stderr
    return lines[0]


def test_check_box_passes(cli: Cli) -> None:
    result = cli("check", "box", *RT)
    assert result.code == 0, result.stderr
    assert "all box checks passed" in result.stdout
    assert "FAIL" not in result.stdout

    result = cli("check", "box", "--json", "--image", BOX_IMAGE, *RT)
    assert result.code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["image"] == BOX_IMAGE
    assert report["ok"] is True
    assert report["checkout"] in ("overlay", "copy")
    assert {c["name"] for c in report["checks"]} == CHECKS
    assert all(c["ok"] for c in report["checks"]), report
    assert all(set(c) == {"name", "ok", "detail"} for c in report["checks"])


def test_check_box_prints_each_row_as_its_check_finishes(cli: Cli) -> None:
    """The first rows (one box's facts) reach a reader while later checks still run: they
    come in a write of their own, before the last row and the summary line."""
    with subprocess.Popen(
        [sys.executable, "-m", "impyard", "--home", str(cli.home), "check", "box", *RT],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, **GIT_ENV},
    ) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        seen = b""
        while b"filesystem is tmpfs" not in seen:
            chunk = os.read(proc.stdout.fileno(), 65536)
            assert chunk, seen.decode() + proc.stderr.read().decode()
            seen += chunk
        running = proc.poll() is None
        rest = proc.stdout.read()
        assert proc.wait() == 0, proc.stderr.read().decode()
    assert running, seen.decode()
    assert b"all box checks passed" not in seen and b"run write limit" not in seen, seen
    lines = (seen + rest).decode().splitlines()
    assert lines[0] == f"impyard check box: {BOX_IMAGE} under {TEST_RUNTIME}"
    assert lines[1].split() == ["check", "result", "detail"]
    rows = lines[2:-1]
    assert {line[: lines[1].index("result")].strip() for line in rows} == CHECKS
    # Aligned though printed one by one: every result starts under the header's.
    assert {line[lines[1].index("result") :].split()[0] for line in rows} <= {"ok", "info"}
    assert lines[-1].startswith("all box checks passed")


def test_check_box_passes_on_the_pi_agent_image(cli: Cli, pi_image: str) -> None:
    result = cli("check", "box", "--json", "--image", pi_image, *RT)
    assert result.code == 0, result.stderr
    report = json.loads(result.stdout)
    assert {c["name"] for c in report["checks"]} == CHECKS
    assert all(c["ok"] for c in report["checks"]), report


def test_a_memory_limit_below_a_full_tmp_is_named_as_the_cause(cli: Cli) -> None:
    """tmpfs pages count against the box's memory: a 1 GiB limit cannot hold a 2 GiB /tmp."""
    assert cli("init").code == 0
    edit_org(cli.home, "memory_bytes = 3221225472", "memory_bytes = 1073741824")
    assert cli("deploy").code == 0
    result = cli("check", "box", "--json", *RT)
    assert result.code != 0
    checks = {c["name"]: c for c in json.loads(result.stdout)["checks"]}
    fill = checks["a full /tmp fits box.memory_bytes"]
    assert fill["ok"] is False
    assert fill["detail"].startswith("OOM-killed after writing")
    assert "box.memory_bytes (1.00 GiB) is smaller than a full /tmp (2.00 GiB)" in fill["detail"]
    others = [c for name, c in checks.items() if name != fill["name"]]
    assert all(c["ok"] for c in others)


def test_missing_image(cli: Cli) -> None:
    image = f"impyard-test-absent:{uuid.uuid4().hex[:8]}"
    result = cli("check", "box", "--image", image)
    assert result.code != 0
    line = _one_line_error(result.stderr)
    assert image in line
    assert "cannot be pulled" in line
    assert result.stdout == ""


def test_engine_unreachable(cli: Cli) -> None:
    result = cli("check", "box", env={"DOCKER_HOST": "tcp://127.0.0.1:9"})
    assert result.code != 0
    line = _one_line_error(result.stderr)
    assert "cannot reach the Docker engine at tcp://127.0.0.1:9" in line


# The shell of this image runs the probe chrooted into /plain, a directory of the
# image's own root filesystem: --tmpfs /tmp is mounted, but the /tmp the probe
# sees is /plain/tmp, a plain directory on the container's overlay root. The
# check must notice from inside the box.
_CHROOT_SH = '#!/bin/busybox sh\nexec /bin/busybox chroot /plain /bin/sh "$@"\n'


@pytest.fixture
def plain_tmp_image(tmp_path: Path) -> Iterator[str]:
    busybox = shutil.which("busybox") or "/bin/busybox"
    ctx = tmp_path / "ctx"
    bin_dir, plain_bin = ctx / "root/bin", ctx / "root/plain/bin"
    for d in (bin_dir, plain_bin, ctx / "root/plain/tmp"):
        d.mkdir(parents=True)
    (ctx / "root/plain/tmp").chmod(0o1777)
    shutil.copy(busybox, bin_dir / "busybox")
    shutil.copy(busybox, plain_bin / "busybox")
    (bin_dir / "sh").write_text(_CHROOT_SH)
    (bin_dir / "sh").chmod(0o755)
    applets = subprocess.run(
        [busybox, "--list"], capture_output=True, text=True, check=True
    ).stdout.split()
    for applet in applets:
        if applet != "busybox":
            (plain_bin / applet).symlink_to("busybox")
    # Root, so the wrapper may chroot (CAP_SYS_CHROOT is in Docker's default set).
    (ctx / "Dockerfile").write_text("FROM scratch\nCOPY root/ /\nUSER 0\n")
    tag = f"impyard-test-plain-tmp:{uuid.uuid4().hex[:12]}"
    env = {**os.environ, "DOCKER_BUILDKIT": "0"}
    subprocess.run(
        ["docker", "build", "-q", "-t", tag, str(ctx)], env=env, check=True, capture_output=True
    )
    try:
        yield tag
    finally:
        subprocess.run(["docker", "rmi", "-f", tag], capture_output=True, check=False)


def test_image_whose_tmp_is_not_tmpfs(cli: Cli, plain_tmp_image: str) -> None:
    result = cli("check", "box", "--image", plain_tmp_image, *RT)
    assert result.code != 0
    line = _one_line_error(result.stderr)
    assert "filesystem is tmpfs" in line
    assert "FAIL" in result.stdout

    result = cli("check", "box", "--json", "--image", plain_tmp_image, *RT)
    assert result.code != 0
    report = json.loads(result.stdout)
    assert report["ok"] is False
    checks = {c["name"]: c for c in report["checks"]}
    assert checks["filesystem is tmpfs"]["ok"] is False
    assert checks["filesystem is tmpfs"]["detail"] != "/tmp is 'tmpfs'"
    assert checks["size is 2 GiB"]["ok"] is False
    # The probe itself still works on the plain directory.
    assert checks["probe reads back ok"]["ok"] is True
    assert checks["a full /tmp fits box.memory_bytes"]["detail"] == "not run: /tmp is not a tmpfs"
