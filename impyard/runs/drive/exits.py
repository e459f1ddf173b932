"""How a box's exit is recorded: its status, and why it may not be checkpointed in the
words a run's ``reason`` keeps."""

from __future__ import annotations

from impyard.box.spec import BoxExit
from impyard.box.watch.tmpwatch import TmpUsage, oom_reason
from impyard.runs.drive.space import space_full_note
from impyard.runs.records.active import ActiveRun
from impyard.runs.records.model import Manifest


def record_exit(
    run: ActiveRun, box_exit: BoxExit, interrupted: str | None, usage: TmpUsage | None
) -> bool:
    """Record how the box ended; True when it is a clean exit that may be checkpointed."""
    m = run.manifest
    runtime = m.runtime or "runc"  # under runsc the /tmp watch sees the whole box
    if box_exit.oom_killed and runtime == "runc":
        m.oom_tmp_bytes = usage.peak_bytes if usage else None
    reason = unclean_reason(box_exit, interrupted, m, run.policy.box.memory_bytes, usage, runtime)
    run.event(
        "box.exited",
        exit_code=box_exit.exit_code,
        oom_killed=box_exit.oom_killed,
        timed_out=box_exit.timed_out,
        seen_by=box_exit.seen_by,
    )
    m.exited(box_exit, reason)
    run.save()
    return reason is None


def unclean_reason(
    box_exit: BoxExit,
    interrupted: str | None,
    manifest: Manifest,
    memory_bytes: int,
    tmp_usage: TmpUsage | None,
    runtime: str = "runc",
) -> str | None:
    """Why a box's exit may not be checkpointed; None for a clean exit."""
    if interrupted is None and box_exit.clean:
        return None
    reason = interrupted or exit_reason(box_exit, memory_bytes, tmp_usage, runtime)
    return reason + space_full_note(manifest)


def exit_reason(
    box_exit: BoxExit, memory_bytes: int, tmp_usage: TmpUsage | None, runtime: str = "runc"
) -> str:
    if box_exit.error:
        return f"engine error: {box_exit.error}"
    if box_exit.timed_out:
        return "timed out and killed"
    if box_exit.oom_killed:
        return oom_reason(memory_bytes, tmp_usage, runtime)
    return f"exited with status {box_exit.exit_code}"
