"""One run, end to end: prepare, box, checkpoint or quarantine.

Every step first records its state in the manifest, then acts, so a host that
dies anywhere leaves a manifest that recovery can resume or quarantine
(``impyard.runs.host.recovery``). ``impyard run`` and ``impyard serve`` both admit a run
with ``admission.execute`` and drive it here; there is no second pipeline. What the
box gets is assembled in ``boxspec``; its checkout in ``run_checkout``, its gateway in
``run_gateway``; how a run ends, in ``endings``.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import time
from pathlib import Path
from typing import Any

from impyard.box.docker.engine import EngineCallError
from impyard.box.launcher.launch import box_pid, kill_box, start_box, wait_box
from impyard.box.spec import BoxExit, BoxSpec, StartedBox
from impyard.box.watch.logs import LogFollower
from impyard.box.watch.tmpwatch import TmpWatch
from impyard.common import names
from impyard.common.errors import ImpyardError
from impyard.knowledge.change import Checkpoint, KnowledgeLimits
from impyard.policy.models import EffectivePolicy
from impyard.queue import leases
from impyard.queue.db import opened
from impyard.runs.drive.beside import Beside
from impyard.runs.drive.boxend import BoxEnd
from impyard.runs.drive.context import RunContext
from impyard.runs.drive.exits import record_exit
from impyard.runs.drive.preload import warm_imports
from impyard.runs.drive.run_checkout import RunCheckout
from impyard.runs.drive.run_gateway import GATEWAY_MODULES, RunGateway
from impyard.runs.drive.space import release_run_space, spare_beside
from impyard.runs.provision.boxspec import box_spec, write_task_file
from impyard.runs.provision.image import resolve_run_image
from impyard.runs.ready.claim import WarmClaim, claim_warm
from impyard.runs.records.model import Manifest, RunOutcome, RunRequest
from impyard.runs.records.record import RunRecord

#: Loaded beside a box's start: the exit checkpoint, the lane and what they use.
ENDING_MODULES = ("impyard.runs.drive.endings",)


class Run(RunRecord):
    """The state machine of one run. Each step (prepare, start_box, record_exit, checkpoint,
    quarantine, finish) writes the manifest before it acts."""

    def __init__(self, ctx: RunContext, manifest: Manifest, policy: EffectivePolicy) -> None:
        super().__init__(ctx.home, ctx.journal, manifest)
        self.ctx = ctx
        self.policy = policy
        self.checkout = RunCheckout(self, ctx.settings)
        self.gateway = RunGateway(self, ctx.journal)
        self.tmp_watch = TmpWatch()
        self.log_follower: LogFollower | None = None
        self.box_end = BoxEnd()
        #: The image id the box runs (resolved while the run prepares).
        self.image_id: str | None = None
        #: The ready box this run claimed (None: it starts a box of its own).
        self.warm: WarmClaim | None = None
        #: Work beside the run's steps (the next run's spare space, formatted while this
        #: box runs; the box's removal): ``finish`` waits for it.
        self.beside: list[Beside[None]] = []
        #: One checkpoint at a time: the box's mid-run ones (on gateway threads) and the
        #: exit checkpoint or quarantine, which waits for one in progress.
        self.checkpoint_lock = threading.Lock()
        self._t0 = time.monotonic()

    @property
    def limits(self) -> KnowledgeLimits:
        """The limits the run was admitted under (older manifests: today's policy)."""
        return self.manifest.limits or KnowledgeLimits.of(self.policy.knowledge)

    def prepare(self, request: RunRequest) -> None:
        m = self.manifest
        m.state = "preparing"
        self.save()
        with self.phase("prepare"):
            # The image and its trust bundle (engine calls) beside the task file, checkout
            # and volume (disk and engine): none needs another, and start needs them all.
            resolve = functools.partial(resolve_run_image, self.home, m, request, self.policy)
            image = Beside("run-image", resolve)
            try:
                knowledge = self.policy.knowledge.enabled  # else nothing is mounted or landed
                seed = self.checkout.plan_seed(request) if knowledge else None
                write_task_file(self.home, request, m, seed)
                self.warm = claim_warm(self, request, image.result, self.beside_box_start)
                if knowledge:
                    self.checkout.prepare(self.warm)
            except BaseException:
                with contextlib.suppress(Exception):
                    image.result()
                raise
            self.image_id = image.result()

    def start_box(self, request: RunRequest) -> None:
        self.gateway.prepare()
        spec = box_spec(self.home, self.manifest, self.policy, request)
        self.manifest.starting(spec.name, spec.image)
        self.save()
        with self.phase("start"):
            log_path = self.home.box_log(spec.run_id)
            start = self.warm.start if self.warm is not None else self.start_cold
            started = start(spec, log_path, request)
            self.log_follower = started.follower
        self.manifest.running(started.container_id, started.image_id, names.utc_now())
        # The box waits in box-init (or a ready box in its gate) for its gateway: attach that
        # first, and record the start after. A host that dies between the two leaves a
        # manifest saying `starting` with the box's name, handled as a crash before start.
        pid = box_pid(started.container_id)
        self.gateway.open()
        self.gateway.attach(pid)
        if self.warm is not None:
            self.warm.release(spec)
        self.save()
        self.event(
            "box.started", container=started.container_id, image=spec.image, runtime=spec.runtime
        )
        if self.ctx.on_box_started is not None:
            self.ctx.on_box_started(self.manifest)
        self.tmp_watch.start(pid)

    def start_cold(self, spec: BoxSpec, log_path: Path, request: RunRequest) -> StartedBox:
        try:
            return start_box(spec, log_path, self.image_id, before_start=self.beside_box_start)
        except EngineCallError as exc:
            if not self.checkout.overlay_mount_failed(exc):
                raise
            self.checkout.fall_back_to_copy(str(exc))
            spec = box_spec(self.home, self.manifest, self.policy, request)
            return start_box(spec, log_path, self.image_id)

    def beside_box_start(self) -> None:
        """Begin what overlaps the engine starting the box (the main thread waits on it):
        load what only the box's exit needs, and format the next run's spare space."""
        warm_imports(GATEWAY_MODULES + ENDING_MODULES)
        spare = spare_beside(self.home, self.manifest.space)
        self.beside += [spare] if spare is not None else []

    def wait_box(self, timeout_seconds: float) -> BoxExit:
        container = self.manifest.container_id
        assert container is not None
        log_path, follower = self.home.box_log(self.manifest.run_id), self.log_follower
        with self.phase("box"):
            box_exit = wait_box(
                container, timeout_seconds, log_path, follower, remove=False, keep_log=False
            )
        # The box's log and removal (``boxend``) overlap recording the exit and the
        # checkpoint; ``finish`` waits for them.
        drop = self.checkout.drop_volume
        self.beside.append(self.box_end.begin(container, log_path, follower, drop))
        return box_exit

    def end(self, box_exit: BoxExit, interrupted: str | None = None) -> None:
        """Record how the box ended, then checkpoint a clean exit or quarantine the rest (after
        a mid-run checkpoint still in progress, which may land first)."""
        with self.checkpoint_lock:
            if self.record_exit(box_exit, interrupted):
                self.checkpoint()
            else:
                self.quarantine()

    def record_exit(self, box_exit: BoxExit, interrupted: str | None = None) -> bool:
        """Record how the box ended; True when it is a clean exit that may be checkpointed."""
        if interrupted is None and self.manifest.run_id in self.ctx.killed_runs:
            interrupted = self.ctx.kill_reason(self.manifest.run_id)
        return record_exit(self, box_exit, interrupted, self.tmp_watch.stop())

    # The endings (snapshot, lane, quarantine) are imported where they are used, for
    # start-up speed only: they load beside the box's start (ENDING_MODULES).

    def checkpoint(self) -> None:
        from impyard.runs.drive import endings

        endings.checkpoint(self)

    def quarantine(self) -> None:
        from impyard.runs.drive import endings

        endings.quarantine_run(self)

    def quarantine_without_box(self, reason: str) -> None:
        from impyard.runs.drive import endings

        endings.quarantine_without_box(self, reason)

    def finish(self, checkpoint: Checkpoint, **outcome: Any) -> None:
        self.box_end.log_kept()  # a follower reads to the log's end once the run finished
        self.manifest.timings_ms["total"] = round((time.monotonic() - self._t0) * 1000, 1)
        self.manifest.finished(checkpoint, names.utc_now(), **outcome)
        self.save()
        self.release_lease()
        self.ctx.finished(self.manifest)
        self.wait_teardown()
        release_run_space(self.home, self.manifest)

    def wait_teardown(self) -> None:
        """The spare space is made, and the box and its volume are gone (their removal ran
        beside the ending)."""
        beside, self.beside = self.beside, []
        for work in beside:
            work.result()

    def release_lease(self) -> None:
        if self.manifest.mode != "reorganize":
            return
        with opened(self.home.db) as conn:
            released = leases.release(conn, self.manifest.imp, self.manifest.run_id)
        if released:
            self.event("lease.released")


def drive(run: Run, request: RunRequest) -> RunOutcome:
    """From a recorded manifest to a terminal one. A host interrupt kills the box and
    quarantines the run: a half-done box is never integrated."""
    try:
        try:
            run.prepare(request)
            run.start_box(request)
        except (Exception, KeyboardInterrupt) as exc:
            reason = "host interrupted" if isinstance(exc, KeyboardInterrupt) else str(exc)
            run.quarantine_without_box(reason)
            if isinstance(exc, ImpyardError | KeyboardInterrupt):
                return RunOutcome(run.manifest)
            raise
        assert run.manifest.timeout_seconds is not None, "recorded at admission"
        try:
            box_exit = run.wait_box(run.manifest.timeout_seconds)
            interrupted = None
        except KeyboardInterrupt:
            assert run.manifest.container_id is not None
            kill_box(run.manifest.container_id)
            box_exit, interrupted = run.wait_box(30), "host interrupted"
    finally:
        run.gateway.close()
    if run.ctx.on_box_exited is not None:
        run.ctx.on_box_exited(run.manifest)
    try:
        run.end(box_exit, interrupted)
    except BaseException:
        with contextlib.suppress(Exception):
            run.wait_teardown()
        raise
    return RunOutcome(run.manifest)
