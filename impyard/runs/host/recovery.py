"""Crash recovery: bring every non-terminal run to a terminal state before new work.

The manifest names the step that was about to happen when the host died; the
engine tells what became of the box. Each resolution is journaled. Nothing is
landed twice: the lane recognises a run that already landed by its trailer.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from impyard.box.launcher.helpers import sweep_helpers
from impyard.box.launcher.launch import box_pid, find_boxes
from impyard.common import names
from impyard.common.errors import EngineError, ImpyardError
from impyard.knowledge.checkouts import runspace
from impyard.policy.compile import policy_for_run
from impyard.policy.models import Policy
from impyard.queue import leases, tasks
from impyard.queue.db import opened
from impyard.runs.checkpoints.landing import settle_pending
from impyard.runs.drive.context import RunContext
from impyard.runs.drive.pipeline import Run
from impyard.runs.drive.space import release_run_space
from impyard.runs.provision import rework
from impyard.runs.records import manifest as manifests
from impyard.runs.records.model import Manifest
from impyard.runs.records.owner import RunOwnership

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Resolution:
    run_id: str
    imp: str
    found_state: str
    action: str  # reattached | checkpointed | quarantined | finished
    checkpoint: str


def _deadline(manifest: Manifest, policy_timeout: float) -> float | None:
    """When the box must be gone: its start plus the timeout it was admitted with."""
    started = names.utc_epoch(manifest.started_at) if manifest.started_at else None
    if started is None:
        return None
    return started + (manifest.timeout_seconds or policy_timeout)


def resolve(ctx: RunContext, manifest: Manifest) -> Resolution:
    """Finish one interrupted run by what really happened to its box."""
    policy, _warnings = policy_for_run(ctx.home, manifest.imp, strict=False)
    run: Run = (ctx.make_run or Run)(ctx, manifest, policy)
    found = manifest.state
    run.event("run.recovering", state=found)
    settle_pending(run)  # a mid-run checkpoint the host died in
    if found in ("checkpointing", "quarantining"):
        (run.checkpoint if found == "checkpointing" else run.quarantine)()
        return Resolution(manifest.run_id, manifest.imp, found, "finished", manifest.checkpoint)
    resume = getattr(run, "resume", None)  # a run whose box is on a cluster node
    if manifest.node is not None and resume is not None and found in ("starting", "running"):
        policy_timeout = float(policy.box.timeout_seconds)
        deadline = _deadline(manifest, policy_timeout)
        run.end(resume(policy_timeout if deadline is None else deadline - time.time()))
        return Resolution(manifest.run_id, manifest.imp, found, "reattached", manifest.checkpoint)
    boxes = []
    if found not in ("created", "preparing"):
        # A ready box claimed by the run keeps the label of the pool box it was.
        label = manifest.container_name if manifest.warm else manifest.run_id
        boxes = find_boxes({"impyard.run": label or manifest.run_id})
    if not boxes:
        run.quarantine_without_box(f"host died while the run was {found}; no box left")
        return Resolution(manifest.run_id, manifest.imp, found, "quarantined", "quarantined")
    box = boxes[0]
    if manifest.container_id is None:
        manifest.container_id = box.container_id
        run.save()
    action = "reattached" if box.status == "running" else "checkpointed"
    deadline = _deadline(manifest, float(policy.box.timeout_seconds))
    if box.status == "running" and ctx.on_box_started is not None:
        ctx.on_box_started(run.manifest)  # serve may kill it on shutdown like its own boxes
    timeout = float(policy.box.timeout_seconds) if deadline is None else deadline - time.time()
    if box.status == "running":
        reattach_gateway(run, box.container_id)
    try:
        box_exit = run.wait_box(timeout)
    finally:
        run.gateway.close()
    finished = names.utc_epoch(box_exit.finished_at) if box_exit.finished_at else None
    if deadline is not None and finished is not None and finished > deadline + 1:
        # It ran past its deadline while no host watched: it should have been killed.
        box_exit = replace(box_exit, timed_out=True)
    run.end(box_exit)
    return Resolution(manifest.run_id, manifest.imp, found, action, run.manifest.checkpoint)


def reattach_gateway(run: Run, container_id: str) -> None:
    """A box that outlived its host lost its gateway with it: listen in its namespace again,
    so its model calls and checkpoints go on. Without one the box is simply cut off."""
    try:
        run.gateway.open()
        run.gateway.attach(box_pid(container_id))
    except ImpyardError as exc:
        log.error("run %s: could not reattach its gateway: %s", run.manifest.run_id, exc)
        run.gateway.close()
        return
    if run.gateway.gateway is not None:
        run.event("gateway.reattached")


def recover_all(
    ctx: RunContext, on_resolved: Callable[[Resolution], None] | None = None
) -> list[Resolution]:
    """Resolve every non-terminal run and release leases of dead holders."""
    resolutions = []
    for manifest in manifests.list_all(ctx.home):
        if manifest.is_terminal:
            continue
        if manifest.node is not None and ctx.make_run is None:
            # Its box runs on a cluster node: only serve on that cluster can take it back.
            log.info(
                "run %s runs on cluster node %s; not recovering it", manifest.run_id, manifest.node
            )
            continue
        owner = RunOwnership.claim(ctx.home, manifest.run_id)
        if owner is None:
            log.info("run %s is driven by a live process; not recovering it", manifest.run_id)
            continue
        with owner:
            try:
                if manifest.space:  # after a reboot its checkout is an unmounted image
                    runspace.ensure_mounted(manifest.space)
                resolution = resolve(ctx, manifest)
            except EngineError as exc:  # the engine is the problem: try again next start
                log.error("could not recover run %s: %s", manifest.run_id, exc)
                continue
            except ImpyardError as exc:
                # Retrying what cannot succeed would strand the run (and its task) forever.
                resolution = give_up(ctx, manifest, f"recovery failed: {exc}")
        resolutions.append(resolution)
        ctx.journal.record(
            "run.recovered",
            run=resolution.run_id,
            imp=resolution.imp,
            found_state=resolution.found_state,
            action=resolution.action,
            checkpoint=resolution.checkpoint,
        )
        if on_resolved is not None:
            on_resolved(resolution)
    remove_left_helpers(ctx)
    sweep_finished_checkouts(ctx)
    republish_origins(ctx)
    with opened(ctx.home.db) as conn:
        for imp, holder in leases.expire_dead(conn, ctx.settings.lease_ttl_seconds):
            ctx.journal.record("lease.expired", imp=imp, run=holder)
        rejected = settle_tasks(ctx, conn)
    for manifest in rejected:
        queue_lost_rework(ctx, manifest)
    return resolutions


def give_up(ctx: RunContext, manifest: Manifest, reason: str) -> Resolution:
    """Quarantine a run recovery cannot finish; if even that fails, end it with the reason."""
    found = manifest.state
    current = manifests.read(ctx.home, manifest.run_id)
    run = Run(ctx, current, Policy())
    try:
        current.quarantining(reason)
        run.save()
        run.quarantine()
    except ImpyardError as exc:
        log.error("could not quarantine run %s: %s", manifest.run_id, exc)
        current.finished(
            "quarantined", names.utc_now(), reason=f"{reason}; quarantine failed: {exc}"
        )
        run.save()
    return Resolution(manifest.run_id, manifest.imp, found, "quarantined", "quarantined")


def settle_tasks(ctx: RunContext, conn: sqlite3.Connection) -> list[Manifest]:
    """A task left 'running' by a dead server is done if its run finished, else queued again.
    The runs of those tasks that ended rejected: each may owe the rework its policy asks for."""
    by_task = {m.task_id: m for m in manifests.list_all(ctx.home) if m.task_id}
    rejected = []
    for task in tasks.list_tasks(conn, "running"):
        manifest = by_task.get(task.id)
        if manifest is not None and manifest.is_terminal:
            tasks.finish(conn, task.id, checkpoint=manifest.checkpoint, run_id=manifest.run_id)
            if manifest.checkpoint == "rejected":
                rejected.append(manifest)
        elif manifest is None:
            tasks.requeue(conn, task.id)
            ctx.journal.record("task.requeued", task=task.id, imp=task.imp)
    return rejected


def queue_lost_rework(ctx: RunContext, manifest: Manifest) -> None:
    """A rejected run's automatic rework is queued just after its manifest says rejected;
    a host that died between the two left a run owed its rework. Queue it now (once per
    run: ``after_rejection`` finds one already queued), recorded in the run's repairs."""
    owner = RunOwnership.claim(ctx.home, manifest.run_id)
    if owner is None:
        return  # a repair command holds the run; it is not a lost ending
    with owner:
        m = manifests.read(ctx.home, manifest.run_id)
        try:
            policy, _warnings = policy_for_run(ctx.home, m.imp, strict=False)
            task = rework.after_rejection(ctx.home, m, policy.review.rework_attempts)
        except (ImpyardError, sqlite3.Error) as exc:
            log.warning("could not queue a rework of run %s: %s", m.run_id, exc)
            return
        if task is not None:
            manifests.write(ctx.home, m)


def remove_left_helpers(ctx: RunContext) -> None:
    """A host that died while a helper existed (the container reading an image's CA roots,
    the overlay probe's box and volume) left it behind; remove this data root's."""
    try:
        removed = sweep_helpers(ctx.home.root)
    except EngineError as exc:  # the engine is the problem: the next start tries again
        log.error("could not remove left-behind helpers: %s", exc)
        return
    for left in removed:
        ctx.journal.record(
            "box.helper_removed", run=left.run or None, helper=left.kind, **{left.what: left.name}
        )


def sweep_finished_checkouts(ctx: RunContext) -> None:
    """A host that died between a run's last manifest write and its cleanup leaves a
    checkout (and a mounted space) behind; quarantined runs keep theirs, unmounted."""
    for manifest in manifests.list_all(ctx.home):
        if not manifest.is_terminal or not _left_behind(ctx, manifest):
            continue
        owner = RunOwnership.claim(ctx.home, manifest.run_id)
        if owner is None:  # its own process is cleaning up right now
            continue
        with owner:
            release_run_space(ctx.home, manifest)
        ctx.journal.record("run.swept", run=manifest.run_id, imp=manifest.imp)


def _left_behind(ctx: RunContext, manifest: Manifest) -> bool:
    space = ctx.home.run_space(manifest.run_id)
    if os.path.ismount(space):
        return True
    if manifest.checkpoint == "quarantined":
        return False
    root = manifest.checkout.root if manifest.checkout else None
    return space.exists() or (root is not None and root.exists())


def republish_origins(ctx: RunContext) -> None:
    """A host that died between moving main and refreshing the published origin leaves
    boxes a stale origin; refreshing is idempotent and cheap."""
    from impyard.knowledge.imps import list_imps
    from impyard.knowledge.integration.origin import publish_origin

    for imp in list_imps(ctx.home):
        try:
            publish_origin(ctx.home, imp)
        except ImpyardError as exc:
            log.error("could not refresh the published origin of %s: %s", imp, exc)
