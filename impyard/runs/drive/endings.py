"""How a run ends, whoever drives it (``drive`` or crash recovery): a clean exit is
snapshotted, validated and integrated through the imp's lane; anything else is
quarantined; then the run is finished and its space released. The pipeline calls these
with the run it drives (an ``ActiveRun``); nothing here knows the pipeline.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
from typing import Any

from impyard import backup
from impyard.box.launcher.launch import kill_box, remove_box
from impyard.box.launcher.volumes import remove_volume
from impyard.common.contract import parse_user
from impyard.common.errors import ImpyardError
from impyard.knowledge.change import Violation
from impyard.knowledge.checkouts.layers import collect_layers, ensure_layer
from impyard.knowledge.checkouts.snapshot import snapshot
from impyard.knowledge.gates.maincheck import check_base
from impyard.knowledge.imps import open_repo
from impyard.knowledge.integration import bulkdelete
from impyard.knowledge.integration.lane import keep_candidate
from impyard.knowledge.integration.quarantine import quarantine
from impyard.knowledge.store.refnames import quarantine_ref
from impyard.knowledge.store.repo import main_commit
from impyard.knowledge.validation.increments import split
from impyard.knowledge.validation.violations import ViolationDigest, digest
from impyard.runs.checkpoints.landing import integrate_run, landed_files, trailers
from impyard.runs.drive.beside import Beside
from impyard.runs.provision import rework
from impyard.runs.records.active import ActiveRun

log = logging.getLogger(__name__)

KNOWLEDGE_DISABLED = (
    "knowledge is disabled by policy (knowledge.enabled = false): no checkout was mounted "
    "and nothing was integrated"
)


def quarantine_without_box(run: ActiveRun, reason: str) -> None:
    """The box never ran to an exit (engine error, interrupt, gone after a crash): make sure
    no box is left, then quarantine whatever the checkout holds."""
    m = run.manifest
    if m.container_id:
        with contextlib.suppress(ImpyardError):
            kill_box(m.container_id)
        with contextlib.suppress(ImpyardError):
            remove_box(m.container_id)
    m.quarantining(reason)
    run.save()
    with contextlib.suppress(ImpyardError):
        if m.volume:
            remove_volume(m.volume)
    quarantine_run(run)


def checkpoint(run: ActiveRun) -> None:
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
    held = bulkdelete.held(result.violations) if result.checkpoint == "rejected" else None
    if result.checkpoint in ("rejected", "conflict"):
        run.event(
            "knowledge.held" if held else f"knowledge.{result.checkpoint}",
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
    # The next base is checked and its layer built beside finishing this run (unmounts).
    next_base = (
        Beside("next-base", lambda: prepare_next_base(run)) if outcome == "integrated" else None
    )
    run.finish(
        checkpoint=outcome,
        produced_commit=produced,
        candidate_ref=result.candidate_ref,
        reason=_reason(outcome, held),
        **digest_fields(found),
    )
    backup.notify(run.home, m.imp)  # queued: a remote that is down never holds the lane
    if outcome == "rejected" and held is None:  # a held change waits for its owner
        queue_rework(run)
    if next_base is not None:
        next_base.result()


def _reason(outcome: str, held: str | None) -> str | None:
    if outcome == "conflict":
        return "integration conflict"
    return f"held: {held}" if held else None


def queue_rework(run: ActiveRun) -> None:
    """After a rejection, the rework ``review.rework_attempts`` asks for, if any. The run
    has ended either way: a rework that cannot be queued is logged, never its failure."""
    try:
        task = rework.after_rejection(run.home, run.manifest, run.policy.review.rework_attempts)
    except (ImpyardError, sqlite3.Error) as exc:
        log.warning("could not queue a rework of run %s: %s", run.manifest.run_id, exc)
        return
    if task is not None:
        run.save()  # the repair record naming the rework task


def quarantine_run(run: ActiveRun) -> None:
    """Keep what the box left at refs/quarantine/<run-id>; main is untouched."""
    m = run.manifest
    with run.phase("quarantine"):
        ref = None
        skipped = digest([])
        if m.checkout is not None:
            repo = open_repo(run.home, m.imp)
            change = snapshot(repo, m.checkout, run.limits)
            # What mid-run checkpoints landed stays on main; the rest is kept here, or the
            # box's final tree when it changed or deleted a checkpointed file (as a
            # candidate keeps it, a deletion named in a trailer).
            parts = split(change, landed_files(repo, m))
            skipped = digest(parts.kept.problems)
            reason = m.reason or "abnormal exit"
            quarantine(repo, m.run_id, m.base_commit, parts.kept, reason, gone=parts.gone)
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


def prepare_next_base(run: ActiveRun) -> None:
    """Check the current main and build its checkout layer now, so the next run starts
    fast: its admission reads the check's 96-byte answer instead of walking what this
    landing changed (and loading git's library first, in a run of its own process).

    The current main, not this run's commit: under concurrency main may already be
    ahead, and that is the base the next run gets."""
    imp = run.manifest.imp
    checkout = run.manifest.checkout
    layered = checkout is not None and checkout.kind == "overlay" and not run.manifest.warm
    try:
        head = main_commit(open_repo(run.home, imp))
        check_base(run.home, imp, head, run.limits)  # a run that landed had knowledge
        if not layered:
            return  # a copy, or a ready box's checkout: no layer is read
        ensure_layer(run.home, imp, head, parse_user(run.policy.box.user))
        # Layers no chain needs any more go now; a prepared run's chain is kept by its
        # checkout record.
        collect_layers(run.home, imp, [head])
    except ImpyardError as exc:  # an optimisation only: the next run does it itself
        log.warning("could not prepare main for the next run: %s", exc)
