"""Admitting a run: everything checked and recorded before anything acts.

The request is checked (prompt, channel), the effective policy read, the base checked
to be a tree a checkout may write (``maincheck``), the run's identity
issued by the host (run id, namespace), its limits and timeout recorded, its owner lock
taken, its bounded writable space allocated against the data root's reserve, and for a
reorganize run the imp's exclusive lease taken. A run that is refused here leaves
nothing behind; one that is admitted is driven to a terminal state by the pipeline.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext

from impyard.box.launcher.volumes import select_checkout_kind
from impyard.common import names
from impyard.common.errors import ConfigError, UsageError
from impyard.common.fsutil import locked, remove_tree
from impyard.common.loopspace import loop_supported
from impyard.knowledge.change import KnowledgeLimits
from impyard.knowledge.checkouts import runspace
from impyard.knowledge.checkouts.layers import BesideWalk, layer_built_beside
from impyard.knowledge.checkouts.runspace import RunSpace
from impyard.knowledge.gates.maincheck import check_base, walks_main
from impyard.knowledge.imps import read_imp_settings, require_imp
from impyard.knowledge.store.mainref import read_main
from impyard.policy.compile import policy_for_run
from impyard.policy.models import EffectivePolicy
from impyard.preflight import run_refusal
from impyard.queue import leases, namespaces
from impyard.queue.db import opened
from impyard.runs.drive.context import RunContext
from impyard.runs.drive.pipeline import Run, drive
from impyard.runs.provision.boxspec import box_timeout
from impyard.runs.provision.taint import taint_of
from impyard.runs.records.model import Manifest, RunOutcome, RunRequest
from impyard.runs.records.owner import RunOwnership


def execute(ctx: RunContext, request: RunRequest) -> RunOutcome:
    """Admit one task, run it in a box, and checkpoint or quarantine what it leaves."""
    home = ctx.home
    if not request.prompt.strip():
        raise UsageError("the task prompt is empty")
    # Everything that becomes a commit trailer is checked before a box runs.
    names.check_channel(request.channel)
    policy, warnings = policy_for_run(home, request.imp, strict=ctx.settings.strict_policy)
    base = read_main(require_imp(home, request.imp))
    # A route that would fail every request fails the run at its first model call, its
    # cause only in the box's log: refuse it here, before a box starts, saying why.
    # Only the routes this run calls count: an owner's --command replaces the agent.
    agent = None if request.command is not None else read_imp_settings(home, request.imp).agent
    refusal = run_refusal(request.imp, policy.gateway, agent, policy.box.env)
    if refusal is not None:
        raise ConfigError(refusal)
    ceiling = policy.box.timeout_seconds
    if request.timeout_seconds is not None and request.timeout_seconds > ceiling:
        # Refused rather than capped: an owner who asked for more must not get less unsaid.
        raise UsageError(
            f"--timeout {request.timeout_seconds:g} is over the box.timeout_seconds of imp "
            f"{request.imp!r} ({ceiling}): a run may shorten the policy's limit, not "
            "lengthen it (raise box.timeout_seconds in the policy)"
        )
    if request.reorganize and not policy.knowledge.enabled:
        raise UsageError(f"imp {request.imp!r}: knowledge is disabled by policy")
    if policy.knowledge.enabled:  # a base no checkout may write is refused before a run exists
        with base_layer_beside_check(ctx, request.imp, base, policy) as beside:
            shape = check_base(home, request.imp, base, KnowledgeLimits.of(policy.knowledge))
            if beside is not None:
                beside.clean(shape)
    manifest = new_manifest(ctx, request, policy, base)
    manifest.warnings = list(warnings)
    if manifest.mode == "reorganize":
        # Fail fast, before anything is written: a refused lease leaves no run behind.
        with opened(home.db) as conn:
            leases.acquire(conn, manifest.imp, manifest.run_id, ctx.settings.lease_ttl_seconds)
    run: Run = (ctx.make_run or Run)(ctx, manifest, policy)
    home.run_dir(manifest.run_id).mkdir(parents=True)
    # Owned before the manifest exists: recovery never sees this run without an owner.
    owner = RunOwnership.claim(home, manifest.run_id)
    assert owner is not None, "a new run directory has no other owner"
    with owner:
        try:
            if policy.knowledge.enabled:  # the space holds the checkout; without one, none
                manifest.space = allocate_space(ctx, manifest.run_id, policy)
        except BaseException:
            # Not admitted (e.g. the disk is too full): leave nothing behind.
            remove_tree(home.run_dir(manifest.run_id))
            run.release_lease()
            raise
        run.save()
        run.event(
            "run.created",
            task=request.task_id,
            mode=manifest.mode,
            base=manifest.base_commit,
            **({"tainted": manifest.taint} if manifest.tainted else {}),
        )
        if ctx.on_admitted is not None:
            ctx.on_admitted(manifest)
        if manifest.mode != "reorganize":
            return drive(run, request)
        run.event("lease.acquired")
        interval = ctx.settings.lease_ttl_seconds / 4
        with leases.LeaseKeeper(home.db, manifest.imp, manifest.run_id, interval):
            return drive(run, request)


def base_layer_beside_check(
    ctx: RunContext, imp: str, base: str, policy: EffectivePolicy
) -> AbstractContextManager[BesideWalk | None]:
    """Where the check walks main and the run's checkout will be an overlay, main's layer
    is built beside the check (a cold 100,000-record imp's image and check take 1.7 s
    together, 2.5 s one after the other), and a check that read all of main tells the
    build its shape; a base found unsafe gets no layer (its tree is refused as it is written).
    Else nothing happens beside it (None)."""
    home = ctx.home
    if walks_main(home, imp, base) and select_checkout_kind(ctx.settings, home) == "overlay":
        return layer_built_beside(home, imp, base, policy.box.user)
    return nullcontext()


def new_manifest(
    ctx: RunContext, request: RunRequest, policy: EffectivePolicy, base: str
) -> Manifest:
    """The run's identity, issued by the host, and what it was admitted under."""
    mode = "reorganize" if request.reorganize else policy.knowledge.normal_mode
    with opened(ctx.home.db) as conn:
        run_id, namespace = namespaces.issue(conn, request.imp)
    taint = taint_of(ctx.home, request)
    return Manifest(
        run_id=run_id,
        imp=request.imp,
        task_id=request.task_id,
        channel=request.channel,
        mode=mode,
        base_commit=base,
        namespace=namespace,
        rework_of=request.rework.of if request.rework else None,
        rework_origin=request.rework.origin if request.rework else None,
        created_at=names.utc_now(),
        timeout_seconds=box_timeout(request, policy),
        runtime=policy.box.runtime,
        limits=KnowledgeLimits.of(policy.knowledge),
        tainted=taint is not None,
        taint=taint,
    )


def allocate_space(ctx: RunContext, run_id: str, policy: EffectivePolicy) -> RunSpace:
    """The run's bounded writable space, admitted against the data root's free space.

    It must hold what the run may keep (``max_repo_bytes``), and in the copy fallback the
    checkout itself too. The check and a reservation happen under one lock, so two runs
    starting together cannot both count the same free space; the space is then made
    outside it, counted by its reservation until it is mounted."""
    settings, home = ctx.settings, ctx.home
    keep = policy.knowledge.max_repo_bytes
    if select_checkout_kind(settings, home) == "copy":
        keep *= 2
    size = runspace.space_size(keep)
    unsupported = loop_supported() if settings.run_space != "plain" else "plain"
    if settings.run_space == "loop" and unsupported is not None:
        raise ConfigError(f"IMPYARD_RUN_SPACE=loop, but loop spaces are unavailable: {unsupported}")
    with locked(home.runs_dir / ".space.lock"):
        runspace.admit(home, size, settings.disk_reserve_bytes)
        runspace.reserve(home, run_id, size)
    try:
        return runspace.create(home, run_id, size, loop=unsupported is None)
    finally:
        runspace.unreserve(home, run_id)
