"""Launching boxes through the SDK: hardening, limits, exits, logs, re-attach, volumes."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from impyard.box.docker import engine
from impyard.box.docker.engine import BoxImageNotFoundError, EngineUnreachableError
from impyard.box.launcher.launch import (
    find_boxes,
    kill_box,
    remove_box,
    run_box,
    start_box,
    wait_box,
)
from impyard.box.launcher.volumes import (
    create_overlay_volume,
    overlay_volumes_supported,
    prepare_upper,
    remove_volume,
    select_checkout_kind,
)
from impyard.box.spec import LABEL_RUN, BoxExit, BoxMount, BoxSpec, box_labels
from impyard.box.watch.logs import HEAD_BYTES, LOG_CAP_BYTES, MARKER, TAIL_BYTES, LogFollower
from impyard.home import Home
from impyard.settings import Settings
from tests.helpers.images import BOX_IMAGE

#: The data root these boxes' labels name (they belong to none).
ROOT = Path("/nonexistent/impyard-box-tests")


def _spec(script: str, **kwargs: object) -> BoxSpec:
    run_id = kwargs.pop("run_id", f"test-{uuid.uuid4().hex[:12]}")
    return BoxSpec(
        image=BOX_IMAGE,
        command=["/bin/sh", "-c", script],
        labels=box_labels(str(run_id), "tester", root=ROOT),
        **kwargs,
    )


def _left_behind(run_id: str) -> list[str]:
    rows = engine.api().containers(all=True, filters={"label": f"{LABEL_RUN}={run_id}"})
    return [r["Id"] for r in rows]


def _run(spec: BoxSpec, tmp_path: Path) -> tuple[BoxExit, str]:
    log = tmp_path / f"{spec.run_id}.log"
    exit_ = run_box(spec, log)
    assert _left_behind(spec.run_id) == []
    return exit_, log.read_text(errors="replace")


# -- spec validation (no engine) ---------------------------------------------


def test_spec_refuses_root_and_unlabelled_boxes() -> None:
    with pytest.raises(ValueError, match="root"):
        BoxSpec(image="i", command=["true"], labels=box_labels("r", "i", root=ROOT), user="0:0")
    with pytest.raises(ValueError, match="labels"):
        BoxSpec(image="i", command=["true"], labels={LABEL_RUN: "r"})
    with pytest.raises(ValueError, match="/tmp"):
        BoxMount(source="/srv", target="/tmp/x", read_only=True)
    spec = BoxSpec(
        image="i", command=["true"], labels=box_labels("r", "i", root=ROOT), env={"A": "1"}
    )
    assert spec.environment() == {"A": "1", "TMPDIR": "/tmp"}


def test_checkout_kind_overrides_need_no_engine(tmp_path: Path) -> None:
    home = Home(tmp_path)
    assert select_checkout_kind(Settings(checkout="copy"), home) == "copy"
    assert select_checkout_kind(Settings(checkout="overlay"), home) == "overlay"


# -- real boxes ----------------------------------------------------------------

HARDENING_PROBE = """
echo "uid=$(id -u)"
grep CapEff /proc/self/status
echo "ifaces=$(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | tr '\\n' ,)"
grep ' /tmp ' /proc/mounts
echo "tmpdir=$TMPDIR"
touch /rootfs-write 2>/dev/null && echo root=writable || echo root=readonly
touch /ro/new 2>/dev/null && echo ro=writable || echo ro=readonly
cat /ro/hello
echo x >/tmp/x && echo tmp=writable
[ -e /opt/impyard/scratch ] && echo scratch=yes || echo scratch=no
echo to-stderr >&2
exit 3
"""


@pytest.mark.docker
def test_box_is_hardened_and_reports_exit_and_logs(tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    (ro / "hello").write_text("hello from host\n")
    spec = _spec(HARDENING_PROBE, mounts=[BoxMount(str(ro), "/ro", read_only=True)])
    exit_, log = _run(spec, tmp_path)
    assert exit_.exit_code == 3
    assert not exit_.clean and not exit_.oom_killed and not exit_.timed_out
    assert exit_.image_id.startswith("sha256:")
    assert exit_.started_at and exit_.finished_at
    assert "uid=65532" in log
    assert "CapEff:\t0000000000000000" in log
    assert "ifaces=lo," in log
    tmp_line = next(line for line in log.splitlines() if " /tmp " in line)
    assert tmp_line.split()[2] == "tmpfs"
    assert {"nosuid", "nodev"} <= set(tmp_line.split()[3].split(","))
    assert "size=2097152k" in tmp_line
    assert "tmpdir=/tmp" in log
    assert "root=readonly" in log
    assert "ro=readonly" in log
    assert "hello from host" in log
    assert "tmp=writable" in log
    assert "scratch=no" in log
    assert "to-stderr" in log  # stderr lands in the same log
    assert not (ro / "new").exists()


@pytest.mark.docker
def test_clean_exit(tmp_path: Path) -> None:
    exit_, log = _run(_spec("echo fine"), tmp_path)
    assert exit_.clean and exit_.exit_code == 0 and exit_.error is None
    assert log == "fine\n"


@pytest.mark.docker
def test_timeout_kills_the_box(tmp_path: Path) -> None:
    exit_, log = _run(_spec("echo started; sleep 60", timeout_seconds=1), tmp_path)
    assert exit_.timed_out
    assert exit_.exit_code == 137
    assert not exit_.clean and not exit_.oom_killed
    assert "started" in log


@pytest.mark.docker
def test_oom_is_reported(tmp_path: Path) -> None:
    # A shell variable of 256 MiB in a 32 MiB box.
    hog = "x=$(head -c 268435456 /dev/zero | tr '\\0' a); echo ${#x}"
    exit_, _ = _run(_spec(hog, memory_bytes=32 * 1024 * 1024), tmp_path)
    assert exit_.oom_killed
    assert not exit_.clean and not exit_.timed_out


@pytest.mark.docker
def test_a_log_flood_keeps_the_head_and_the_tail_with_a_marker(tmp_path: Path) -> None:
    """40 MB of output after a first line: the engine's rotating copy has long dropped the
    start; the log keeps it, the end, and says how much is missing in between."""
    flood = 40 * 1024 * 1024
    script = (
        f"echo FIRST-LINE-OF-EVIDENCE; head -c {flood} /dev/zero | tr '\\0' a; "
        "echo; echo LAST-LINE-OF-EVIDENCE"
    )
    exit_, log = _run(_spec(script), tmp_path)
    assert exit_.clean
    assert log.startswith("FIRST-LINE-OF-EVIDENCE\n")
    assert log.endswith("LAST-LINE-OF-EVIDENCE\n")
    seen = len("FIRST-LINE-OF-EVIDENCE\n") + flood + len("\nLAST-LINE-OF-EVIDENCE\n")
    omitted = seen - HEAD_BYTES - TAIL_BYTES
    marker = MARKER.format(omitted=omitted, head=HEAD_BYTES, tail=TAIL_BYTES)
    assert log[HEAD_BYTES : HEAD_BYTES + len(marker)] == marker
    assert len(log) == LOG_CAP_BYTES + len(marker)
    assert exit_.log_truncated and exit_.log_bytes == LOG_CAP_BYTES


@pytest.mark.docker
def test_a_short_log_is_kept_whole(tmp_path: Path) -> None:
    exit_, log = _run(_spec("echo one; echo two >&2; echo three"), tmp_path)
    assert exit_.clean and not exit_.log_truncated
    assert sorted(log.splitlines()) == ["one", "three", "two"]
    assert "[impyard:" not in log


def _await_output(container_id: str, text: bytes, seconds: float = 30) -> None:
    """Until the box has printed ``text`` (the docker SDK as an observer)."""
    import time

    import docker

    client = docker.from_env(timeout=10)
    try:
        container = client.containers.get(container_id)
        deadline = time.monotonic() + seconds
        while text not in container.logs():
            assert time.monotonic() < deadline, f"the box never printed {text!r}"
            time.sleep(0.05)
    finally:
        client.close()


@pytest.mark.docker
def test_reattach_to_a_running_box(tmp_path: Path) -> None:
    spec = _spec("echo waiting; sleep 60")
    started = start_box(spec)
    try:
        found = find_boxes({LABEL_RUN: spec.run_id})
        assert [b.container_id for b in found] == [started.container_id]
        assert found[0].status == "running" and found[0].imp == "tester"
        assert found[0].image_id == started.image_id
        # Killed only once it said so: a box killed before its first line (a slow start
        # under gVisor on a loaded machine) would leave nothing for the log to show.
        _await_output(started.container_id, b"waiting")
        assert kill_box(started.container_id)
        # A new host process only knows the id: wait_box picks the box up.
        exit_ = wait_box(started.container_id, 30, tmp_path / "box.log")
    finally:
        remove_box(started.container_id)
    assert exit_.exit_code == 137 and not exit_.timed_out
    assert "waiting" in (tmp_path / "box.log").read_text()
    assert _left_behind(spec.run_id) == []
    remove_box(started.container_id)  # idempotent
    assert not kill_box(started.container_id)


@pytest.mark.docker
def test_following_a_box_never_replays_what_the_engine_already_logged(tmp_path: Path) -> None:
    """The follower attaches before the box starts; output the box writes before the
    engine has set the attach up must not reach the log twice (once replayed from the
    engine's log file, once from the stream). Attaching to a box that already printed
    shows the replay directly: the follower must carry only what came after."""
    import docker

    spec = _spec("echo early; until [ -e /tmp/go ]; do sleep 0.05; done; echo late")
    started = start_box(spec)
    log_path = tmp_path / "box.log"
    try:
        _await_output(started.container_id, b"early")
        follower = LogFollower.attach(started.container_id, log_path)
        client = docker.from_env(timeout=10)
        try:
            client.containers.get(started.container_id).exec_run(["touch", "/tmp/go"])
        finally:
            client.close()
        exit_ = wait_box(started.container_id, 30, log_path, follower)
    finally:
        remove_box(started.container_id)
    assert exit_.clean
    assert log_path.read_text() == "late\n"


@pytest.mark.docker
def test_find_reports_exited_box(tmp_path: Path) -> None:
    spec = _spec("exit 7")
    started = start_box(spec)
    try:
        wait = engine.api().wait(started.container_id, timeout=30)
        assert wait["StatusCode"] == 7
        (box,) = find_boxes({LABEL_RUN: spec.run_id})
        assert box.status == "exited" and box.exit_code == 7 and not box.oom_killed
    finally:
        remove_box(started.container_id)
    assert find_boxes({LABEL_RUN: spec.run_id}) == []


@pytest.mark.docker
def test_missing_image_and_unreachable_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = BoxSpec(
        image=f"impyard-test-absent:{uuid.uuid4().hex[:8]}",
        command=["true"],
        labels=box_labels("r", "i", root=ROOT),
    )
    with pytest.raises(BoxImageNotFoundError, match="cannot be pulled"):
        run_box(spec, tmp_path / "log")
    monkeypatch.setenv("DOCKER_HOST", "tcp://127.0.0.1:9")
    try:
        with pytest.raises(EngineUnreachableError, match=r"127\.0\.0\.1:9"):
            run_box(_spec("true"), tmp_path / "log")
    finally:
        engine.reset_client()


@pytest.mark.docker
def test_overlay_volume_checkout(tmp_path: Path) -> None:
    lower, upper, work = tmp_path / "lower", tmp_path / "upper", tmp_path / "work"
    lower.mkdir()
    (lower / "base.md").write_text("base\n")
    prepare_upper(upper, work)
    name = f"impyard-test-{uuid.uuid4().hex[:12]}"
    labels = box_labels(name, "tester", root=ROOT)
    create_overlay_volume(name, f"lowerdir={lower},upperdir={upper},workdir={work}", labels)
    try:
        spec = _spec(
            "cat /k/base.md && echo new >/k/new.md",
            mounts=[BoxMount(name, "/k", False, "volume")],
        )
        exit_, log = _run(spec, tmp_path)
    finally:
        remove_volume(name)
    assert exit_.clean, log
    assert log == "base\n"
    assert (upper / "new.md").read_text() == "new\n"
    assert not (lower / "new.md").exists()
    remove_volume(name)  # idempotent
    assert engine.api().volumes(filters={"name": name})["Volumes"] in (None, [])


@pytest.mark.docker
def test_overlay_probe_is_cached(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    home.root.mkdir()
    assert overlay_volumes_supported(home) in (True, False)
    cache = home.engine_features.read_text()
    # Keyed without `docker info`: the local daemon's pid and start time.
    assert engine.engine_key() in cache and "pid=" in engine.engine_key()
    # The probe dirs are cleaned up.
    assert [p.name for p in home.root.iterdir()] == [home.engine_features.name]
    assert select_checkout_kind(Settings(checkout="auto"), home) in ("overlay", "copy")
    assert not os.environ.get("DOCKER_HOST", "").startswith("tcp://127.0.0.1:9")
