"""How a run ends, whoever drives it (``drive`` or crash recovery): a clean exit is
snapshotted, validated and integrated through the imp's lane; anything else is
quarantined; then the run is finished and its space released.
"""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING, Any

from impyard import backup
from impyard.box.launch import kill_box, remove_box
from impyard.box.spec import BoxExit
from impyard.box.tmpwatch import TmpUsage, oom_reason
from impyard.contract import parse_user
from impyard.errors import ImpyardError
from impyard.home import Home
from impyard.knowledge import runspace
from impyard.knowledge.change import Violation
from impyard.knowledge.checkout import release_checkout
from impyard.knowledge.imps import open_repo
from impyard.knowledge.increments import split
from impyard.knowledge.lane import keep_candidate
from impyard.knowledge.layers import collect_layers, ensure_layer
from impyard.knowledge.quarantine import quarantine, quarantine_ref
from impyard.knowledge.repo import main_commit
from impyard.knowledge.snapshot import snapshot
from impyard.knowledge.violations import ViolationDigest, digest
from impyard.runs.beside import Beside
from impyard.runs.landing import integrate_run, landed_files, trailers
from impyard.runs.model import Manifest

if TYPE_CHECKING:
    from impyard.runs.pipeline import Run

log = logging.getLogger(__name__)

KNOWLEDGE_DISABLED = (
    "knowledge is disabled by policy (knowledge.enabled = false): no checkout was mounted "
    "and nothing was integrated"
)


def finish_after_exit(run: Run, box_exit: BoxExit, interrupted: str | None = None) -> None:
    """Record how the box ended, then checkpoint a clean exit or quarantine the rest (after
    a mid-run checkpoint still in progress, which may land first)."""
    with run.checkpoint_lock:
        if run.record_exit(box_exit, interrupted):
            run.checkpoint()
        else:
            run.quarantine()


def quarantine_without_box(run: Run, reason: str) -> None:
    """The box never ran to an exit (engine error, interrupt, gone after a crash): make sure
    no box is left, then quarantine whatever the checkout holds."""
    container = run.manifest.container_id
    if container:
        with contextlib.suppress(ImpyardError):
            kill_box(container)
        with contextlib.suppress(ImpyardError):
            remove_box(container)
    run.manifest.quarantining(reason)
    run.save()
    with contextlib.suppress(ImpyardError):
        run.drop_volume()
    run.quarantine()


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


def space_full_note(manifest: Manifest) -> str:
    """Appended to the reason when a box stopped with its writable space full."""
    space = manifest.space
    if space is None or not runspace.is_full(space):
        return ""
    return (
        f"; the run's writable space ({space.size_bytes // 2**20} MiB, sized from "
        "knowledge.max_repo_bytes) is full"
    )


def checkpoint(run: Run) -> None:
    """Snapshot, validate and integrate a clean exit through the imp's lane: what is new
    since the run's last mid-run checkpoint, if it had any."""
    m = run.manifest
    if m.checkout is None:
        run.event("knowledge.disabled")
        run.finish(checkpoint="empty", reason=KNOWLEDGE_DISABLED)
        return
    number = m.next_checkpoint
    exit_trailers = trailers(m, number, at_exit=True)
    with run.phase("checkpoint"):
        repo = open_repo(run.home, m.imp)
        change = snapshot(repo, m.checkout, run.limits)
        landed = landed_files(repo, m)
        parts = split(change, landed)
        if not run.policy.knowledge.checkpoint_on_clean_exit and not parts.rest.is_empty:
            reason = "policy disables checkpoint_on_clean_exit"
            violation = Violation("", "checkpoint-disabled", reason)
            every = [violation, *parts.touched]
            result = keep_candidate(
                repo, parts.kept, exit_trailers, "rejected", every, gone=parts.gone
            )
        else:
            result = integrate_run(
                run.home, m, change, run.limits, number=number, at_exit=True, landed=landed
            )
    found = digest(result.violations)
    run.event("knowledge.validated", violations=found.total, checkpoint=result.checkpoint)
    if result.checkpoint == "integrated":
        run.event(
            "knowledge.integrated", commit=result.commit, base=m.base_commit, checkpoint=number
        )
    elif result.checkpoint in ("rejected", "conflict"):
        run.event(
            f"knowledge.{result.checkpoint}",
            candidate=result.candidate_ref,
            violations=found.kept,
            **found.summary_fields(),
        )
    outcome, produced = result.checkpoint, result.commit
    earlier = m.landed_checkpoints
    if earlier and produced is None:
        # Mid-run checkpoints landed: the run produced their last commit, whatever the exit.
        produced = earlier[-1].commit
        if outcome == "empty":
            outcome = "integrated"
    # The next base's layer (disk work) is built beside finishing this run (unmounts).
    next_base = (
        Beside("next-base", lambda: prepare_next_base(run)) if outcome == "integrated" else None
    )
    run.finish(
        checkpoint=outcome,
        produced_commit=produced,
        candidate_ref=result.candidate_ref,
        reason="integration conflict" if outcome == "conflict" else None,
        **digest_fields(found),
    )
    backup.notify(run.home, m.imp)  # queued: a remote that is down never holds the lane
    if next_base is not None:
        next_base.result()


def quarantine_run(run: Run) -> None:
    """Keep what the box left at refs/quarantine/<run-id>; main is untouched."""
    m = run.manifest
    with run.phase("quarantine"):
        ref = None
        skipped = digest([])
        if m.checkout is not None:
            repo = open_repo(run.home, m.imp)
            change = snapshot(repo, m.checkout, run.limits)
            # What mid-run checkpoints landed stays on main; the rest is kept here.
            rest = split(change, landed_files(repo, m)).rest
            skipped = digest(rest.problems)
            quarantine(repo, m.run_id, m.base_commit, rest, m.reason or "abnormal exit")
            ref = quarantine_ref(m.run_id)
    run.event("run.quarantined", reason=m.reason, ref=ref, skipped=skipped.total)
    earlier = m.landed_checkpoints
    run.finish(
        checkpoint="quarantined",
        quarantine_ref=ref,
        produced_commit=earlier[-1].commit if earlier else None,
        **digest_fields(skipped),
    )
    if ref is not None:
        backup.notify(run.home, m.imp)


def digest_fields(found: ViolationDigest) -> dict[str, Any]:
    """Manifest fields of a violation list: the kept ones, and the totals when it was cut."""
    return {
        "validation_errors": found.kept,
        "validation_errors_total": found.total if found.truncated else None,
        "validation_error_counts": found.counts if found.truncated else None,
    }


def release_run_space(home: Home, manifest: Manifest) -> None:
    """Drop a finished run's checkout and space. A quarantined run keeps it: in a loop
    space as the unmounted image ``space.img`` (mount it read-only to look), which frees
    its loop device."""
    space = manifest.space
    if manifest.checkpoint == "quarantined":
        if space is not None:
            runspace.unmount(space)
        return
    drop_run_space(home, manifest)


def drop_run_space(home: Home, manifest: Manifest) -> None:
    """Delete a run's checkout and space, kept or not (gc drops a quarantined run's once
    ``retention.quarantine_days`` have passed). Its checkout record goes too, so layer
    collection no longer keeps the chain it named."""
    space = manifest.space
    record = home.run_checkout_record(manifest.run_id)
    if space is None and manifest.checkout is not None:
        # Runs from before run spaces kept their checkout in the run dir itself.
        release_checkout(manifest.checkout, record)
    else:
        record.unlink(missing_ok=True)
    if space is not None:
        runspace.release(space)  # the space goes whole, checkout and index included


def prepare_next_base(run: Run) -> None:
    """Build the checkout layer of the current main now, so the next run starts fast.

    The current main, not this run's commit: under concurrency main may already be
    ahead, and that is the base the next run gets."""
    if run.manifest.checkout is None or run.manifest.checkout.kind != "overlay":
        return
    imp = run.manifest.imp
    try:
        head = main_commit(open_repo(run.home, imp))
        ensure_layer(run.home, imp, head, parse_user(run.policy.box.user))
        # Layers no chain needs any more go now; a prepared run's chain is kept by its
        # checkout record.
        collect_layers(run.home, imp, [head])
    except ImpyardError as exc:  # an optimisation only: the next run builds it itself
        log.warning("could not pre-build the checkout layer of main: %s", exc)
