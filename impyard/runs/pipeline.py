"""One run, end to end: prepare, box, checkpoint or quarantine.

Every step first records its state in the manifest, then acts, so a host that
dies anywhere leaves a manifest that recovery can resume or quarantine
(``impyard.runs.recovery``). Both ``impyard run`` and ``impyard serve`` go
through ``execute``; there is no second pipeline.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from impyard import names
from impyard.box.logs import LogFollower
from impyard.box.tmpwatch import TmpUsage, TmpWatch, oom_reason
from impyard.box.trust import BOX_EXTRA_CA, copy_extra_ca, extra_ca_env
from impyard.contract import parse_user
from impyard.errors import ConfigError, ImpyardError, UsageError
from impyard.fsutil import locked, remove_tree
from impyard.home import Home
from impyard.journal import Journal
from impyard.knowledge import runspace
from impyard.knowledge.change import KnowledgeLimits
from impyard.knowledge.runspace import RunSpace
from impyard.knowledge.violations import ViolationDigest, digest
from impyard.queue import leases, namespaces
from impyard.queue.db import opened
from impyard.runs import manifest as manifests
from impyard.runs.model import Manifest, RunOutcome, RunRequest
from impyard.runs.owner import RunOwnership
from impyard.settings import Settings

if TYPE_CHECKING:
    import pygit2

    from impyard.box.spec import BoxExit, BoxSpec
    from impyard.gateway import Gateway
    from impyard.knowledge.change import Change
    from impyard.knowledge.checkout import Checkout
    from impyard.knowledge.lane import Trailers
    from impyard.policy.models import EffectivePolicy

log = logging.getLogger(__name__)

BOX_KNOWLEDGE = "/opt/impyard/knowledge"
BOX_ORIGIN = "/opt/impyard/origin.git"
BOX_TASK = "/opt/impyard/task.md"
BOX_INIT = "/opt/impyard/bin/box-init"
KNOWLEDGE_DISABLED = (
    "knowledge is disabled by policy (knowledge.enabled = false): no checkout was mounted "
    "and nothing was integrated"
)


@dataclass
class RunContext:
    """What a pipeline needs from its host process."""

    settings: Settings
    journal: Journal
    # Called with the manifest after the box started (serve tracks running boxes).
    on_box_started: Callable[[Manifest], None] | None = None
    #: Runs whose box the host killed (serve's shutdown): whatever their box's exit status,
    #: such a run is quarantined, never integrated half-done.
    killed_runs: set[str] = field(default_factory=set)

    @property
    def home(self) -> Home:
        return Home(self.settings.home)


class Run:
    """The state machine of one run. Each step (prepare, start_box, record_exit, checkpoint,
    quarantine, finish) writes the manifest before it acts."""

    def __init__(self, ctx: RunContext, manifest: Manifest, policy: EffectivePolicy) -> None:
        self.ctx = ctx
        self.home = ctx.home
        self.manifest = manifest
        self.policy = policy
        self.gateway: Gateway | None = None
        self.tmp_watch = TmpWatch()
        self.log_follower: LogFollower | None = None
        self._t0 = time.monotonic()

    # -- bookkeeping -------------------------------------------------------------------

    def save(self, **changes: Any) -> None:
        for key, value in changes.items():
            setattr(self.manifest, key, value)
        manifests.write(self.home, self.manifest)

    def event(self, name: str, **fields: Any) -> None:
        self.ctx.journal.record(name, run=self.manifest.run_id, imp=self.manifest.imp, **fields)

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        start = time.monotonic()
        try:
            yield
        finally:
            self.manifest.timings_ms[name] = round((time.monotonic() - start) * 1000, 1)

    @property
    def run_dir(self) -> Path:
        return self.home.run_dir(self.manifest.run_id)

    @property
    def limits(self) -> KnowledgeLimits:
        return KnowledgeLimits.of(self.policy.knowledge)

    def checkout(self) -> Checkout:
        from impyard.knowledge.checkout import Checkout

        assert self.manifest.checkout is not None
        return Checkout.from_dict(self.manifest.checkout)

    # -- steps -------------------------------------------------------------------------

    def prepare(self, request: RunRequest) -> None:
        from impyard.box.spec import box_labels
        from impyard.box.volumes import create_overlay_volume, select_checkout_kind
        from impyard.knowledge.checkout import mount_options, prepare_checkout

        self.save(state="preparing")
        with self.phase("prepare"):
            if not self.policy.knowledge.enabled:
                write_task_file(self.home, self.run_dir / "task.md", request, self.manifest)
                return
            kind = select_checkout_kind(self.ctx.settings, self.home)
            owner = parse_user(self.policy.box.user)
            checkout = prepare_checkout(
                self.home,
                self.manifest.imp,
                self.manifest.run_id,
                self.manifest.base_commit,
                kind,
                owner,
            )
            self.manifest.checkout = checkout.to_dict()
            if checkout.kind == "overlay":
                volume = f"impyard-{self.manifest.run_id}"
                self.save(volume=volume)
                create_overlay_volume(
                    volume,
                    mount_options(checkout),
                    labels=box_labels(self.manifest.run_id, self.manifest.imp),
                )
            write_task_file(self.home, self.run_dir / "task.md", request, self.manifest)
            extra_ca = self.policy.box.extra_ca_file
            if extra_ca is not None:
                copy_extra_ca(Path(extra_ca), self.home.run_extra_ca(self.manifest.run_id))

    def start_box(self, request: RunRequest) -> None:
        from impyard.box.launch import start_box

        self.open_gateway()
        spec = self.box_spec(request)
        self.save(state="starting", container_name=spec.name, image=spec.image)
        with self.phase("start"):
            started = start_box(spec, self.home.box_log(spec.run_id))
            self.log_follower = started.follower
        self.save(
            state="running",
            container_id=started.container_id,
            image_id=started.image_id,
            started_at=names.utc_now(),
        )
        self.event("box.started", container=started.container_id, image=spec.image)
        if self.ctx.on_box_started is not None:
            self.ctx.on_box_started(self.manifest)
        pid = self.box_pid(started.container_id)
        self.attach_gateway(pid)
        self.tmp_watch.start(pid)

    def box_pid(self, container_id: str) -> int:
        from impyard.box import engine

        state = engine.call(
            "inspect", engine.api().inspect_container, container_id, container_id=container_id
        )["State"]
        return int(state["Pid"])

    def open_gateway(self) -> None:
        """The box's only way out. Its command waits in box-init until the listener is bound
        inside its network namespace; if that fails, the command never runs (fail closed)."""
        if not self.policy.gateway.enabled:
            return
        from impyard.gateway import Gateway

        self.gateway = Gateway.start(
            self.policy.gateway,
            home=self.home,
            imp=self.manifest.imp,
            run_id=self.manifest.run_id,
            journal=self.ctx.journal,
        )
        (self.run_dir / "signal").mkdir(exist_ok=True)

    def attach_gateway(self, pid: int) -> None:
        if self.gateway is None:
            return
        from impyard.gateway import write_ready

        with self.phase("gateway"):
            self.gateway.attach(pid)
            write_ready(self.run_dir / "signal")

    def close_gateway(self) -> None:
        if self.gateway is not None:
            self.gateway.close()

    def box_spec(self, request: RunRequest) -> BoxSpec:
        from impyard.box.spec import BoxMount, BoxSpec, box_labels
        from impyard.knowledge.repo import read_imp_settings

        m = self.manifest
        box = self.policy.box
        imp_settings = read_imp_settings(self.home, m.imp)
        if request.command is not None:
            command = ["/bin/sh", "-c", request.command]
        elif imp_settings.command:
            command = ["/bin/sh", "-c", imp_settings.command]
        else:
            command = list(box.command)
        timeout = box_timeout(request, self.policy)
        # The owner's [box.env] first: the host's contract variables below always win (policy
        # validation already refuses the names they use).
        env = {
            **box.env,
            "IMPYARD_IMP": m.imp,
            "IMPYARD_RUN_ID": m.run_id,
            "IMPYARD_TASK_FILE": BOX_TASK,
            "TMPDIR": "/tmp",
            "HOME": "/tmp",
        }
        mounts = [
            BoxMount(source=str(self.home.origin(m.imp)), target=BOX_ORIGIN, read_only=True),
            BoxMount(source=str(self.run_dir / "task.md"), target=BOX_TASK, read_only=True),
        ]
        if m.checkout is not None:  # none when policy turns knowledge off
            checkout = self.checkout()
            if checkout.kind == "overlay":
                assert m.volume is not None
                knowledge = BoxMount(
                    source=m.volume, target=BOX_KNOWLEDGE, read_only=False, kind="volume"
                )
            else:
                knowledge = BoxMount(
                    source=str(checkout.root), target=BOX_KNOWLEDGE, read_only=False
                )
            mounts.insert(0, knowledge)
            env |= {
                "IMPYARD_KNOWLEDGE_DIR": BOX_KNOWLEDGE,
                "IMPYARD_KNOWLEDGE_BASE": m.base_commit,
                "IMPYARD_KNOWLEDGE_NAMESPACE": m.namespace,
                "IMPYARD_KNOWLEDGE_MODE": m.mode,
            }
        entrypoint = None
        if box.extra_ca_file is not None:
            # box-init builds the merged bundle on the tmpfs before the command runs.
            env |= extra_ca_env()
            mounts.append(
                BoxMount(
                    source=str(self.home.run_extra_ca(m.run_id)),
                    target=BOX_EXTRA_CA,
                    read_only=True,
                )
            )
            entrypoint = [BOX_INIT]
        if self.gateway is not None:
            from impyard.gateway import BOX_READY_PATH, BOX_SIGNAL_DIR, WAIT_FOR_ENV

            env |= self.gateway.proxy_env() | {WAIT_FOR_ENV: BOX_READY_PATH}
            mounts.append(
                BoxMount(source=str(self.run_dir / "signal"), target=BOX_SIGNAL_DIR, read_only=True)
            )
            entrypoint = [BOX_INIT]
        return BoxSpec(
            name=m.container_name or f"impyard-{m.run_id}",
            image=imp_settings.image or box.image,
            command=command,
            user=box.user,
            env=env,
            mounts=mounts,
            entrypoint=entrypoint,
            memory_bytes=box.memory_bytes,
            cpus=box.cpus,
            pids_limit=box.pids_limit,
            network=box.network,
            labels=box_labels(m.run_id, m.imp),
            timeout_seconds=timeout,
        )

    def wait_box(self, timeout_seconds: float) -> BoxExit:
        from impyard.box.launch import wait_box

        assert self.manifest.container_id is not None
        with self.phase("box"):
            return wait_box(
                self.manifest.container_id,
                timeout_seconds,
                self.home.box_log(self.manifest.run_id),
                self.log_follower,
            )

    def record_exit(self, box_exit: BoxExit, interrupted: str | None = None) -> bool:
        """Record how the box ended; True when it is a clean exit that may be checkpointed."""
        if interrupted is None and self.manifest.run_id in self.ctx.killed_runs:
            interrupted = "killed by the host (serve shutdown)"
        clean = (
            interrupted is None
            and box_exit.error is None
            and box_exit.exit_code == 0
            and not box_exit.oom_killed
            and not box_exit.timed_out
        )
        usage = self.tmp_watch.stop()
        if box_exit.oom_killed:
            self.manifest.oom_tmp_bytes = usage.peak_bytes if usage else None
        reason = interrupted or abnormal_reason(box_exit, self.policy.box.memory_bytes, usage)
        space = RunSpace.from_dict(self.manifest.space) if self.manifest.space else None
        if not clean and space is not None and runspace.is_full(space):
            reason += (
                f"; the run's writable space ({space.size_bytes // 2**20} MiB, sized from "
                "knowledge.max_repo_bytes) is full"
            )
        self.event(
            "box.exited",
            exit_code=box_exit.exit_code,
            oom_killed=box_exit.oom_killed,
            timed_out=box_exit.timed_out,
        )
        self.save(
            state="checkpointing" if clean else "quarantining",
            exit_code=box_exit.exit_code,
            oom_killed=box_exit.oom_killed,
            timed_out=box_exit.timed_out,
            reason=None if clean else reason,
        )
        self.drop_volume()
        return clean

    def drop_volume(self) -> None:
        if self.manifest.volume:
            from impyard.box.volumes import remove_volume

            remove_volume(self.manifest.volume)

    def trailers(self) -> Trailers:
        from impyard.knowledge.lane import Trailers

        m = self.manifest
        return Trailers(
            imp=m.imp,
            run=m.run_id,
            task=m.task_id or "",
            channel=m.channel or "",
            base=m.base_commit,
            mode=m.mode,
        )

    def checkpoint(self) -> None:
        """Snapshot, validate and integrate a clean exit through the imp's lane."""
        from impyard.knowledge.lane import integrate
        from impyard.knowledge.repo import open_repo
        from impyard.knowledge.snapshot import snapshot

        m = self.manifest
        if m.checkout is None:
            self.event("knowledge.disabled")
            self.finish(checkpoint="empty", reason=KNOWLEDGE_DISABLED)
            return
        with self.phase("checkpoint"):
            repo = open_repo(self.home, m.imp)
            change = snapshot(repo, self.checkout(), self.limits)
            if not self.policy.knowledge.checkpoint_on_clean_exit and not change.is_empty:
                self.keep_candidate(repo, change, "policy disables checkpoint_on_clean_exit")
                return
            result = integrate(
                self.home,
                m.imp,
                change,
                base=m.base_commit,
                namespace=m.namespace,
                mode=m.mode,
                limits=self.limits,
                trailers=self.trailers(),
            )
        found = digest(result.violations)
        self.event("knowledge.validated", violations=found.total, checkpoint=result.checkpoint)
        if result.checkpoint == "integrated":
            self.event("knowledge.integrated", commit=result.commit, base=m.base_commit)
        elif result.checkpoint in ("rejected", "conflict"):
            self.event(
                f"knowledge.{result.checkpoint}",
                candidate=result.candidate_ref,
                violations=found.kept,
                **found.summary_fields(),
            )
        self.finish(
            checkpoint=result.checkpoint,
            produced_commit=result.commit,
            candidate_ref=result.candidate_ref,
            reason="integration conflict" if result.checkpoint == "conflict" else None,
            **digest_fields(found),
        )
        if result.checkpoint == "integrated":
            self.prepare_next_base()

    def keep_candidate(self, repo: pygit2.Repository, change: Change, reason: str) -> None:
        """Keep a change policy will not integrate at refs/candidates/<run-id>."""
        import pygit2

        from impyard.knowledge.lane import candidate_ref
        from impyard.knowledge.quarantine import preserved_commit
        from impyard.knowledge.repo import imp_signature

        m = self.manifest
        commit = preserved_commit(
            repo,
            m.base_commit,
            change,
            summary=f"Candidate of run {m.run_id} (not on main: {reason})",
            details=[],
            author=imp_signature(m.imp),
            trailers=self.trailers().lines(),
        )
        ref = candidate_ref(m.run_id)
        repo.references.create(ref, pygit2.Oid(hex=commit), force=True)
        error = {"path": "", "rule": "checkpoint-disabled", "message": reason}
        self.event("knowledge.rejected", candidate=ref, violations=[error])
        self.finish(checkpoint="rejected", validation_errors=[error], candidate_ref=ref)

    def quarantine(self) -> None:
        from impyard.knowledge.quarantine import quarantine, quarantine_ref
        from impyard.knowledge.repo import open_repo
        from impyard.knowledge.snapshot import snapshot

        m = self.manifest
        with self.phase("quarantine"):
            ref = None
            skipped = digest([])
            if m.checkout is not None:
                repo = open_repo(self.home, m.imp)
                change = snapshot(repo, self.checkout(), self.limits)
                skipped = digest(change.problems)
                quarantine(repo, m.run_id, m.base_commit, change, m.reason or "abnormal exit")
                ref = quarantine_ref(m.run_id)
        self.event("run.quarantined", reason=m.reason, ref=ref, skipped=skipped.total)
        self.finish(checkpoint="quarantined", quarantine_ref=ref, **digest_fields(skipped))

    def finish(self, **changes: Any) -> None:
        self.manifest.timings_ms["total"] = round((time.monotonic() - self._t0) * 1000, 1)
        self.save(state="finished", ended_at=names.utc_now(), **changes)
        self.release_lease()
        self.cleanup()

    def release_lease(self) -> None:
        if self.manifest.mode != "reorganize":
            return
        with opened(self.home.db) as conn:
            released = leases.release(conn, self.manifest.imp, self.manifest.run_id)
        if released:
            self.event("lease.released")

    def cleanup(self) -> None:
        """Integrated, empty, rejected and conflicting runs drop their checkout; refs keep the
        change. A quarantined run keeps it for the owner: in a loop space, as the unmounted
        image ``space.img`` (mount it read-only to look), which frees its loop device."""
        release_run_space(self.home, self.manifest)

    def prepare_next_base(self) -> None:
        """Build the checkout layer of the current main now, so the next run starts fast.

        The current main, not this run's commit: under concurrency main may already be
        ahead, and that is the base the next run gets."""
        if (self.manifest.checkout or {}).get("kind") != "overlay":
            return
        from impyard.knowledge.layers import collect_layers, ensure_layer
        from impyard.knowledge.repo import main_commit, open_repo

        try:
            head = main_commit(open_repo(self.home, self.manifest.imp))
            ensure_layer(self.home, self.manifest.imp, head, parse_user(self.policy.box.user))
            # Layers no chain needs any more go now; a prepared run's chain is kept by its
            # checkout record.
            collect_layers(self.home, self.manifest.imp, [head])
        except ImpyardError as exc:  # an optimisation only: the next run builds it itself
            log.warning("could not pre-build the checkout layer of main: %s", exc)


def release_run_space(home: Home, manifest: Manifest) -> None:
    """Drop a finished run's checkout and space (a quarantined run's image is kept)."""
    from impyard.knowledge.checkout import Checkout, release_checkout

    space = RunSpace.from_dict(manifest.space) if manifest.space else None
    if manifest.checkpoint == "quarantined":
        if space is not None:
            runspace.unmount(space)
        return
    if manifest.checkout is not None and (space is None or space.kind == "plain"):
        release_checkout(
            Checkout.from_dict(manifest.checkout), home.run_checkout_record(manifest.run_id)
        )
    else:
        home.run_checkout_record(manifest.run_id).unlink(missing_ok=True)
    if space is not None:
        runspace.release(space)  # a loop space goes whole: no per-file unlinking


def digest_fields(found: ViolationDigest) -> dict[str, Any]:
    """Manifest fields of a violation list: the kept ones, and the totals when it was cut."""
    return {
        "validation_errors": found.kept,
        "validation_errors_total": found.total if found.truncated else None,
        "validation_error_counts": found.counts if found.truncated else None,
    }


def box_timeout(request: RunRequest, policy: EffectivePolicy) -> float:
    """``--timeout`` may shorten the policy's wall-clock limit, never lengthen it."""
    ceiling = float(policy.box.timeout_seconds)
    return min(request.timeout_seconds, ceiling) if request.timeout_seconds else ceiling


def abnormal_reason(box_exit: BoxExit, memory_bytes: int, tmp_usage: TmpUsage | None = None) -> str:
    if box_exit.error:
        return f"engine error: {box_exit.error}"
    if box_exit.timed_out:
        return "timed out and killed"
    if box_exit.oom_killed:
        return oom_reason(memory_bytes, tmp_usage)
    return f"exited with status {box_exit.exit_code}"


def write_task_file(home: Home, path: Path, request: RunRequest, manifest: Manifest) -> None:
    from impyard.fsutil import atomic_write_text

    text = request.prompt.rstrip("\n") + "\n"
    if request.channel:
        from impyard.memory.block import memory_block

        block = memory_block(home, manifest.imp, request.channel)
        if block:
            text += "\n" + block.rstrip("\n") + "\n"
    atomic_write_text(path, text)
    path.chmod(0o644)


def new_manifest(
    ctx: RunContext, request: RunRequest, policy: EffectivePolicy, base: str
) -> Manifest:
    """Allocate the run's identity on the host: run id and a namespace registered as unique."""
    mode = "reorganize" if request.reorganize else policy.knowledge.normal_mode
    with opened(ctx.home.db) as conn:
        run_id, namespace = namespaces.issue(conn, request.imp)
    return Manifest(
        run_id=run_id,
        imp=request.imp,
        task_id=request.task_id,
        channel=request.channel,
        mode=mode,
        base_commit=base,
        namespace=namespace,
        created_at=names.utc_now(),
    )


def acquire_lease(ctx: RunContext, manifest: Manifest) -> None:
    with opened(ctx.home.db) as conn:
        leases.acquire(conn, manifest.imp, manifest.run_id, ctx.settings.lease_ttl_seconds)


def execute(ctx: RunContext, request: RunRequest) -> RunOutcome:
    """Run one task in a box and checkpoint or quarantine what it leaves."""
    from impyard.knowledge.repo import main_commit, open_repo
    from impyard.policy.compile import policy_for_run

    home = ctx.home
    if not request.prompt.strip():
        raise UsageError("the task prompt is empty")
    # Everything that becomes a commit trailer is checked before a box runs.
    names.check_channel(request.channel)
    policy, warnings = policy_for_run(home, request.imp, strict=ctx.settings.strict_policy)
    repo = open_repo(home, request.imp)
    if request.reorganize and not policy.knowledge.enabled:
        raise UsageError(f"imp {request.imp!r}: knowledge is disabled by policy")
    base = main_commit(repo)
    manifest = new_manifest(ctx, request, policy, base)
    manifest.warnings = list(warnings)
    manifest.timeout_seconds = box_timeout(request, policy)
    if manifest.mode == "reorganize":
        # Fail fast, before anything is written: a refused lease leaves no run behind.
        acquire_lease(ctx, manifest)
    home.run_dir(manifest.run_id).mkdir(parents=True)
    # Owned before the manifest exists: recovery never sees this run without an owner.
    owner = RunOwnership.claim(home, manifest.run_id)
    assert owner is not None, "a new run directory has no other owner"
    with owner:
        try:
            if policy.knowledge.enabled:  # the space holds the checkout; without one, none
                manifest.space = allocate_space(ctx, manifest.run_id, policy).to_dict()
        except BaseException:
            # Not admitted (e.g. the disk is too full): leave nothing behind.
            remove_tree(home.run_dir(manifest.run_id))
            Run(ctx, manifest, policy).release_lease()
            raise
        return _admitted(ctx, request, manifest, policy)


def allocate_space(ctx: RunContext, run_id: str, policy: EffectivePolicy) -> RunSpace:
    """The run's bounded writable space, admitted against the data root's free space.

    It must hold what the run may keep (``max_repo_bytes``), and in the copy fallback the
    checkout itself too. Admission and creation happen under one lock, so two runs
    starting together cannot both count the same free space."""
    from impyard.box.volumes import select_checkout_kind

    settings, home = ctx.settings, ctx.home
    keep = policy.knowledge.max_repo_bytes
    if select_checkout_kind(settings, home) == "copy":
        keep *= 2
    size = runspace.space_size(keep)
    unsupported = runspace.loop_supported() if settings.run_space != "plain" else "plain"
    if settings.run_space == "loop" and unsupported is not None:
        raise ConfigError(f"IMPYARD_RUN_SPACE=loop, but loop spaces are unavailable: {unsupported}")
    with locked(home.runs_dir / ".space.lock"):
        runspace.admit(home, size, settings.disk_reserve_bytes)
        return runspace.create(home, run_id, size, loop=unsupported is None)


def _admitted(
    ctx: RunContext, request: RunRequest, manifest: Manifest, policy: EffectivePolicy
) -> RunOutcome:
    home, base = ctx.home, manifest.base_commit
    run = Run(ctx, manifest, policy)
    run.save()
    run.event("run.created", task=request.task_id, mode=manifest.mode, base=base)
    if manifest.mode == "reorganize":
        run.event("lease.acquired")
    keeper = (
        leases.LeaseKeeper(
            home.db, manifest.imp, manifest.run_id, ctx.settings.lease_ttl_seconds / 4
        )
        if manifest.mode == "reorganize"
        else contextlib.nullcontext()
    )
    with keeper:
        return drive(run, request)


def drive(run: Run, request: RunRequest) -> RunOutcome:
    """From a recorded manifest to a terminal one. A host interrupt kills the box and
    quarantines the run: a half-done box is never integrated."""
    try:
        try:
            run.prepare(request)
            run.start_box(request)
        except (Exception, KeyboardInterrupt) as exc:
            reason = "host interrupted" if isinstance(exc, KeyboardInterrupt) else str(exc)
            fail_before_exit(run, reason)
            if isinstance(exc, ImpyardError | KeyboardInterrupt):
                return RunOutcome(run.manifest)
            raise
        timeout = run.manifest.timeout_seconds or box_timeout(request, run.policy)
        try:
            box_exit = run.wait_box(timeout)
            interrupted = None
        except KeyboardInterrupt:
            box_exit = stop_box(run)
            interrupted = "host interrupted"
    finally:
        run.close_gateway()
    if run.record_exit(box_exit, interrupted=interrupted):
        run.checkpoint()
    else:
        run.quarantine()
    return RunOutcome(run.manifest)


def stop_box(run: Run) -> BoxExit:
    from impyard.box.launch import kill_box

    assert run.manifest.container_id is not None
    kill_box(run.manifest.container_id)
    return run.wait_box(30)


def fail_before_exit(run: Run, reason: str) -> None:
    """The box never ran to an exit (engine error, interrupt): quarantine what exists."""
    from impyard.box.launch import kill_box, remove_box

    if run.manifest.container_id:
        with contextlib.suppress(ImpyardError):
            kill_box(run.manifest.container_id)
        with contextlib.suppress(ImpyardError):
            remove_box(run.manifest.container_id)
    run.save(state="quarantining", reason=reason)
    with contextlib.suppress(ImpyardError):
        run.drop_volume()
    run.quarantine()
