"""Launch, wait for, kill, find and remove boxes through the engine's API.

The hot path is create + start + wait + logs + inspect + remove, each one HTTP
request (``engineapi``). The measured floor for that is ~190 ms on a 2-core machine
(create 8, start 150, wait 25, remove 6); nothing here pings the engine or polls.

A box survives the host process that started it: ``find_boxes`` + ``wait_box``
re-attach to it after a crash, so ``wait_box`` takes only a container id.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from impyard.box.docker import engine, taskexits
from impyard.box.docker.engine import EngineCallError, EngineObjectNotFoundError, call
from impyard.box.docker.engineapi import EngineAPI
from impyard.box.docker.enginehttp import EngineTimeout
from impyard.box.docker.runtime import RuntimeUnavailableError, engine_runtimes
from impyard.box.spec import (
    LABEL_HELPER,
    LABEL_IMP,
    LABEL_RUN,
    TMP_TMPFS,
    BoxExit,
    BoxInfo,
    BoxSpec,
    StartedBox,
)
from impyard.box.watch.logs import KeptLog, LogFollower, copy_logs

#: The engine's own copy of the output (json-file driver) is bounded too, so a
#: box printing forever cannot fill /var/lib/docker before its timeout. Runs read the
#: output live (``logs.LogFollower``); this copy serves a box re-attached after a crash.
_ENGINE_LOG_CONFIG = {"max-size": "16m", "max-file": "1"}
_NEVER = "0001-01-01T00:00:00Z"
#: After a kill, how long the engine gets to report the exit.
_AFTER_KILL_WAIT_SECONDS = 30.0


def _host_config(spec: BoxSpec) -> dict[str, Any]:
    return {
        # Only these mounts and the tmpfs: no other host path enters the box.
        "Mounts": [
            {"Target": m.target, "Source": m.source, "Type": m.kind, "ReadOnly": m.read_only}
            for m in spec.mounts
        ],
        "Tmpfs": {"/tmp": TMP_TMPFS},
        "ReadonlyRootfs": True,
        "CapDrop": ["ALL"],
        "SecurityOpt": ["no-new-privileges"],
        "NetworkMode": spec.network,
        "Runtime": spec.runtime,
        "Memory": spec.memory_bytes,
        # Swap equal to memory: no swap, so a memory hog is OOM-killed, not slowed.
        "MemorySwap": spec.memory_bytes,
        "NanoCpus": int(spec.cpus * 1e9),
        "PidsLimit": spec.pids_limit,
        "LogConfig": {"Type": "json-file", "Config": _ENGINE_LOG_CONFIG},
    }


def network_disabled(spec: BoxSpec) -> bool:
    """Whether the box is created with ``NetworkDisabled`` beside NetworkMode "none".

    Under runc this skips libnetwork's sandbox entirely: runc gives the box a fresh netns
    holding only `lo`, as "none" does, but the start is ~250 ms faster on engine 20.10
    (measured 190 vs 440 ms start+wait). The netns is reachable as /proc/<pid>/ns/net.
    Under runsc (registered with ``--network=host``, so gVisor's sockets live in the
    container's netns) nothing brings that namespace's `lo` up when the network is
    disabled, and the gateway the host opens there would be unreachable ("Network is
    unreachable"); "none" alone has the engine bring `lo` up, and nothing else."""
    return spec.runtime == "runc"


def resolve_image(image: str) -> str:
    """The id of the local image ``image`` names (BoxImageNotFoundError: none)."""
    found = call("image inspect", engine.api().inspect_image, image, image=image)
    return str(found["Id"])


def _create(api: EngineAPI, spec: BoxSpec, image_id: str) -> dict[str, Any]:
    created: dict[str, Any] = call(
        "create",
        api.create_container,
        # By id, so the image recorded is the image that runs even if the tag moves.
        image_id,
        command=spec.command,
        entrypoint=spec.entrypoint,
        user=spec.user,
        environment=spec.environment(),
        labels={**spec.labels, "impyard.image": spec.image},
        working_dir=spec.working_dir,
        name=spec.name,
        network_disabled=network_disabled(spec),
        host_config=_host_config(spec),
        image=spec.image,
        retry_server_errors=False,
    )
    return created


def start_box(
    spec: BoxSpec,
    log_path: Path | None = None,
    image_id: str | None = None,
    before_start: Callable[[], object] | None = None,
) -> StartedBox:
    """Create and start a hardened box; the container is removed again if start fails.

    With ``log_path``, the box's output is attached to before it starts (``follower``).
    ``image_id``: what ``spec.image`` was resolved to, when the caller already knows.
    ``before_start``: called once the box is created, just before the start request
    (the longest wait on the engine, ~100 ms), to begin work that overlaps it."""
    api = engine.api()
    image_id = image_id or resolve_image(spec.image)
    try:
        created = _create(api, spec, image_id)
    except EngineCallError as exc:
        if exc.status == 400 and "Unknown runtime" in str(exc):
            # Deploy checked the runtime; the engine lost it since (reconfigured, restarted).
            raise RuntimeUnavailableError(spec.runtime, engine_runtimes()) from exc
        raise
    container_id = str(created["Id"])
    follower = None
    try:
        if log_path is not None:
            follower = LogFollower.attach(container_id, log_path)
        if before_start is not None:
            before_start()
        call(
            "start",
            api.start,
            container_id,
            retry_server_errors=False,
            container_id=container_id,
            image=spec.image,
        )
    except BaseException:
        if follower is not None:
            follower.close()
        with contextlib.suppress(Exception):
            remove_box(container_id)
        raise
    return StartedBox(container_id=container_id, image_id=image_id, follower=follower)


def _wait(container_id: str, timeout_seconds: float | None) -> dict[str, Any] | None:
    """The engine's wait answer, or None when ``timeout_seconds`` passed first."""
    try:
        return engine.api().wait(container_id, timeout=timeout_seconds)
    except EngineTimeout:
        return None


#: ``_engine_or_clean_exit``'s answer when containerd saw the box end cleanly first.
_CLEAN: dict[str, Any] = {"StatusCode": 0}


def _engine_or_clean_exit(
    exits: taskexits.TaskExits, container_id: str, timeout_seconds: float
) -> dict[str, Any] | None:
    """The engine's wait answer (None: the box still runs at the deadline), or ``_CLEAN``
    as soon as containerd reports the box's clean exit, whichever comes first. The engine
    is asked beside the watcher, so a box the watcher never sees ends as it always did."""
    answer: list[dict[str, Any] | BaseException | None] = []

    def engine_wait() -> None:
        try:
            answer.append(
                call("wait", _wait, container_id, timeout_seconds, container_id=container_id)
            )
        except BaseException as exc:  # handed to the caller's thread below
            answer.append(exc)
        exits.poke()

    waiter = threading.Thread(target=engine_wait, name="box-wait", daemon=True)
    waiter.start()
    if exits.wait_clean(
        container_id, timeout_seconds + _AFTER_KILL_WAIT_SECONDS, lambda: bool(answer)
    ):
        return _CLEAN
    waiter.join()
    found = answer[0]
    if isinstance(found, BaseException):
        raise found
    return found


def box_pid(container_id: str) -> int:
    """The host pid of the box's first process (its network namespace is the gateway's)."""
    info = call("inspect", engine.api().inspect_container, container_id, container_id=container_id)
    return int(info["State"]["Pid"])


def kill_box(container_id: str) -> bool:
    """SIGKILL the box; False when it was not running (already exited or gone)."""
    try:
        call("kill", engine.api().kill, container_id, container_id=container_id)
    except EngineObjectNotFoundError:
        return False
    except EngineCallError as exc:
        if exc.status == 409:  # "is not running"
            return False
        raise
    return True


def remove_box(container_id: str) -> None:
    """Remove the box and its anonymous volumes; already gone is fine."""
    with contextlib.suppress(EngineObjectNotFoundError):
        call(
            "remove",
            engine.api().remove_container,
            container_id,
            v=True,
            force=True,
            container_id=container_id,
        )


def wait_box(
    container_id: str,
    timeout_seconds: float,
    log_path: Path,
    follower: LogFollower | None = None,
    *,
    remove: bool = True,
    keep_log: bool = True,
) -> BoxExit:
    """Wait for the box, kill it at ``timeout_seconds`` from now, keep its log, remove it
    (``remove=False``: the caller removes it once it exited; on an error it goes here;
    ``keep_log=False``: the caller keeps its log, ``keep_box_log``, before removing it).

    Works on any box, including one started by an earlier host process
    (pass the time it has left; ``<= 0`` kills it at once). With a ``follower`` started
    with the box, the log keeps the head of the output even when the engine's rotating
    copy has dropped it; without one (a re-attached box) it is what the engine holds.
    In a process watching containerd (``taskexits``), a box that ends cleanly is answered
    as soon as containerd saw it end, without the engine's inspect, and an OOM kill
    containerd reported after the exit (which the engine then misses) is still reported.
    """
    api = engine.api()
    timed_out = False
    exits = taskexits.watching()
    if timeout_seconds > 0 and exits is not None:
        result = _engine_or_clean_exit(exits, container_id, timeout_seconds)
    elif timeout_seconds > 0:
        result = call("wait", _wait, container_id, timeout_seconds, container_id=container_id)
    else:
        result = None
    if result is None:
        # Still running at the deadline. A box that exits between the two calls
        # was not killed by us and is reported as it exited.
        timed_out = kill_box(container_id)
        result = call(
            "wait", _wait, container_id, _AFTER_KILL_WAIT_SECONDS, container_id=container_id
        )
        if result is None:
            raise EngineCallError(
                f"box {container_id[:12]} did not stop within {_AFTER_KILL_WAIT_SECONDS:.0f}s"
                " of being killed",
                call="wait",
                container_id=container_id,
            )
    by_containerd = result is _CLEAN
    try:
        kept = keep_box_log(container_id, log_path, follower) if keep_log else None
        if by_containerd:
            info: dict[str, Any] = {"State": {"StartedAt": None, "ExitCode": 0}}
        else:
            info = call("inspect", api.inspect_container, container_id, container_id=container_id)
    except BaseException:
        remove_box(container_id)
        raise
    if remove:
        remove_box(container_id)
    state = info.get("State") or {}
    wait_error = (result.get("Error") or {}).get("Message") if result else None
    error = wait_error or state.get("Error") or None
    started_at = state.get("StartedAt")
    exit_code = int(result.get("StatusCode", state.get("ExitCode", -1)))
    oom_killed = bool(state.get("OOMKilled"))
    if exits is not None and not by_containerd:
        # A SIGKILL the engine does not call an OOM kill may be one whose event came late.
        late_oom = exit_code == 137 and not oom_killed and not timed_out
        grace = taskexits.OOM_AFTER_EXIT_SECONDS if late_oom else 0.0
        oom_killed = exits.oom_killed(container_id, grace) or oom_killed
    if not by_containerd and (not started_at or started_at == _NEVER):
        # `wait` returns at once for a box that was created but never started
        # (host died in between); that is not a clean exit.
        error = error or "box was created but never started"
        exit_code = -1
        started_at = None
    finished_at = state.get("FinishedAt")
    return BoxExit(
        exit_code=exit_code,
        oom_killed=oom_killed,
        timed_out=timed_out,
        error=error,
        container_id=container_id,
        image_id=str(info.get("Image", "")),
        started_at=started_at,
        finished_at=None if finished_at in (None, _NEVER) else finished_at,
        log_bytes=kept.kept_bytes if kept else 0,
        log_truncated=kept.truncated if kept else False,
        seen_by="containerd" if by_containerd else "engine",
    )


def keep_box_log(container_id: str, log_path: Path, follower: LogFollower | None) -> KeptLog:
    """The exited box's output kept at ``log_path``: the follower's (it ends once the engine
    closed the box's streams), or the engine's copy when there was none or it failed."""
    kept = follower.finish() if follower is not None else None
    return kept if kept is not None else copy_logs(container_id, log_path)


def run_box(spec: BoxSpec, log_path: Path) -> BoxExit:
    """Start a box and wait for it with the spec's timeout."""
    started = start_box(spec, log_path)
    try:
        return wait_box(started.container_id, spec.timeout_seconds, log_path, started.follower)
    except BaseException:
        with contextlib.suppress(Exception):
            remove_box(started.container_id)
        raise


def find_boxes(labels: dict[str, str] | None = None) -> list[BoxInfo]:
    """Impyard boxes on the engine (any state) carrying every given label (key=value)."""
    api = engine.api()
    wanted = [LABEL_RUN] + [f"{k}={v}" for k, v in sorted((labels or {}).items())]
    found = call("list", api.containers, all=True, filters={"label": wanted})
    boxes: list[BoxInfo] = []
    for row in found:
        container_id = str(row["Id"])
        if LABEL_HELPER in (row.get("Labels") or {}):
            continue  # serves a run (reads its image's roots) but is not its box
        try:
            info = call("inspect", api.inspect_container, container_id, container_id=container_id)
        except EngineObjectNotFoundError:
            continue  # removed between list and inspect
        state = info.get("State") or {}
        box_labels = dict((info.get("Config") or {}).get("Labels") or {})
        status = str(state.get("Status", "unknown"))
        started = state.get("StartedAt")
        finished = state.get("FinishedAt")
        boxes.append(
            BoxInfo(
                container_id=container_id,
                run_id=box_labels.get(LABEL_RUN),
                imp=box_labels.get(LABEL_IMP),
                status=status,
                exit_code=int(state["ExitCode"]) if status in ("exited", "dead") else None,
                oom_killed=bool(state.get("OOMKilled")),
                started_at=None if started in (None, _NEVER) else started,
                finished_at=None if finished in (None, _NEVER) else finished,
                image_id=str(info.get("Image", "")),
                labels=box_labels,
            )
        )
    return boxes
