"""One run, end to end: prepare, box, checkpoint or quarantine.

Every step first records its state in the manifest, then acts, so a host that
dies anywhere leaves a manifest that recovery can resume or quarantine
(``impyard.runs.recovery``). ``impyard run`` and ``impyard serve`` both admit a run
with ``admission.execute`` and drive it here; there is no second pipeline. What the
box gets is assembled in ``boxspec``; how a run ends, in ``endings``.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from impyard import names
from impyard.box.engine import EngineCallError
from impyard.box.image_roots import image_roots
from impyard.box.launch import (
    box_pid,
    kill_box,
    remove_box,
    resolve_image,
    start_box,
    wait_box,
)
from impyard.box.logs import LogFollower
from impyard.box.spec import BoxExit, box_labels
from impyard.box.tmpwatch import TmpWatch
from impyard.box.trust import write_box_bundle
from impyard.box.volumes import (
    create_overlay_volume,
    forget_overlay_support,
    remove_volume,
    select_checkout_kind,
)
from impyard.errors import ImpyardError
from impyard.gateway.boxside import write_ready
from impyard.gateway.ca import ca_certificate
from impyard.home import Home
from impyard.journal import Journal
from impyard.knowledge import runspace
from impyard.knowledge.change import Checkpoint, KnowledgeLimits
from impyard.knowledge.checkout import mount_options, prepare_checkout
from impyard.knowledge.runspace import RunSpace
from impyard.policy.models import EffectivePolicy
from impyard.queue import leases
from impyard.queue.db import opened
from impyard.runs import manifest as manifests
from impyard.runs.beside import Beside
from impyard.runs.boxspec import box_command, box_spec, write_task_file
from impyard.runs.model import Manifest, RunOutcome, RunRequest
from impyard.runs.warm import warm_imports
from impyard.settings import Settings

if TYPE_CHECKING:
    from impyard.gateway.server import Gateway

log = logging.getLogger(__name__)


@dataclass
class RunContext:
    """What a pipeline needs from its host process."""

    settings: Settings
    journal: Journal
    #: Called with the manifest once the run is admitted and recorded, before it prepares
    #: (a foreground run names itself and starts showing its output here).
    on_admitted: Callable[[Manifest], None] | None = None
    # Called with the manifest after the box started (serve tracks running boxes).
    on_box_started: Callable[[Manifest], None] | None = None
    #: Called with the manifest once the box has exited, before the run's ending: serve
    #: counts a slot as a box, so the next task may start while this run is integrated.
    on_box_exited: Callable[[Manifest], None] | None = None
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
        #: The image id the box runs (resolved while the run prepares).
        self.image_id: str | None = None
        self.teardown: Beside[None] | None = None
        #: The next run's spare space, formatted while this box runs.
        self.spare: Beside[None] | None = None
        #: One checkpoint at a time: the box's mid-run ones (on gateway threads) and the
        #: exit checkpoint or quarantine, which waits for one in progress.
        self.checkpoint_lock = threading.Lock()
        #: The manifest is changed and saved from the run's thread and from a gateway thread.
        self.manifest_lock = threading.RLock()
        self._t0 = time.monotonic()

    # -- bookkeeping -------------------------------------------------------------------

    def save(self) -> None:
        with self.manifest_lock:
            manifests.write(self.home, self.manifest)

    def event(self, name: str, **fields: Any) -> None:
        self.ctx.journal.record(name, run=self.manifest.run_id, imp=self.manifest.imp, **fields)

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        start = time.monotonic()
        try:
            yield
        finally:
            with self.manifest_lock:
                self.manifest.timings_ms[name] = round((time.monotonic() - start) * 1000, 1)

    @property
    def limits(self) -> KnowledgeLimits:
        """The limits the run was admitted under (older manifests: today's policy)."""
        return self.manifest.limits or KnowledgeLimits.of(self.policy.knowledge)

    # -- steps -------------------------------------------------------------------------

    def prepare(self, request: RunRequest) -> None:
        m = self.manifest
        m.state = "preparing"
        self.save()
        with self.phase("prepare"):
            # The image and its trust bundle (engine calls) beside the task file, checkout
            # and volume (disk and engine): none needs another, and start needs them all.
            image = Beside("run-image", functools.partial(self.resolve_image, request))
            try:
                write_task_file(self.home, request, m)
                if self.policy.knowledge.enabled:  # else nothing is mounted or integrated
                    self.prepare_knowledge()
            except BaseException:
                with contextlib.suppress(Exception):
                    image.result()
                raise
            self.image_id = image.result()

    def prepare_knowledge(self) -> None:
        m = self.manifest
        kind = select_checkout_kind(self.ctx.settings, self.home)
        checkout = prepare_checkout(
            self.home, m.imp, m.run_id, m.base_commit, kind, self.policy.box.user
        )
        m.checkout = checkout
        if checkout.kind == "overlay":
            m.volume = f"impyard-{m.run_id}"
            self.save()
            labels = box_labels(m.run_id, m.imp)
            create_overlay_volume(m.volume, mount_options(checkout), labels=labels)

    def resolve_image(self, request: RunRequest) -> str:
        """The id of the image the box runs, and the trust bundle made for it."""
        _command, image = box_command(self.home, self.manifest, request, self.policy)
        image_id = resolve_image(image)
        self.write_trust(image_id)
        return image_id

    def write_trust(self, image_id: str) -> None:
        """The box's CA bundle: its image's roots, plus the inspection CA and the owner's
        extra CA when they apply (nothing is written when neither does)."""
        gateway = self.policy.gateway
        inspecting = gateway.enabled and gateway.inspect_tls
        extra = self.policy.box.extra_ca_file
        if not inspecting and extra is None:
            return
        write_box_bundle(
            self.home.run_ca_bundle(self.manifest.run_id),
            image_roots(self.home.image_roots_dir, image_id),
            inspection_ca=ca_certificate(self.home.gateway_ca_dir) if inspecting else None,
            extra_ca_file=Path(extra) if extra is not None else None,
            shared_dir=self.home.box_bundles_dir,
        )

    def start_box(self, request: RunRequest) -> None:
        if self.policy.gateway.enabled:
            self.home.run_signal_dir(self.manifest.run_id).mkdir(exist_ok=True)
        spec = box_spec(self.home, self.manifest, self.policy, request)
        self.manifest.starting(spec.name, spec.image)
        self.save()
        with self.phase("start"):
            try:
                started = start_box(
                    spec,
                    self.home.box_log(spec.run_id),
                    self.image_id,
                    before_start=self.beside_box_start,
                )
            except EngineCallError as exc:
                if not self.overlay_mount_failed(exc):
                    raise
                self.fall_back_to_copy(str(exc))
                spec = box_spec(self.home, self.manifest, self.policy, request)
                started = start_box(spec, self.home.box_log(spec.run_id), self.image_id)
            self.log_follower = started.follower
        self.manifest.running(started.container_id, started.image_id, names.utc_now())
        # The box waits in box-init for its gateway: attach that first, and record the
        # start after. A host that dies between the two leaves a manifest saying
        # `starting` with the box's name, which recovery handles as it does a crash
        # between create and start.
        pid = box_pid(started.container_id)
        self.open_gateway()
        self.attach_gateway(pid)
        self.save()
        self.event(
            "box.started", container=started.container_id, image=spec.image, runtime=spec.runtime
        )
        if self.ctx.on_box_started is not None:
            self.ctx.on_box_started(self.manifest)
        self.tmp_watch.start(pid)

    def beside_box_start(self) -> None:
        """Begin what overlaps the engine starting the box (the main thread waits on it):
        load what only the box's exit needs, and format the next run's spare space."""
        warm_imports(GATEWAY_MODULES + ENDING_MODULES)
        space = self.manifest.space
        if space is not None and space.kind == "loop" and self.spare is None:
            self.spare = Beside("run-spare", functools.partial(_make_spare, self.home, space))

    def overlay_mount_failed(self, exc: EngineCallError) -> bool:
        """The engine could not mount the run's overlay volume (the box never started)."""
        checkout = self.manifest.checkout
        text = str(exc).lower()
        return (
            checkout is not None
            and checkout.kind == "overlay"
            and ("mounting volume" in text or "mount local volume" in text)
        )

    def fall_back_to_copy(self, reason: str) -> None:
        """The cached answer said overlays work and the engine disagrees (it changed under
        the same key): forget the answer, and give this run a full copy instead. Its space
        was sized for an overlay upper dir, so a box that also writes close to
        ``max_repo_bytes`` may fill it sooner than a copy-sized one."""
        m = self.manifest
        self.event("checkout.fallback", reason=reason[:300])
        forget_overlay_support(self.home)
        self.drop_volume()
        m.volume = None
        self.save()
        m.checkout = prepare_checkout(
            self.home, m.imp, m.run_id, m.base_commit, "copy", self.policy.box.user
        )
        self.save()

    def open_gateway(self) -> None:
        """The box's only way out. Its command waits in box-init until the listener is bound
        inside its network namespace; if that fails, the command never runs (fail closed)."""
        if not self.policy.gateway.enabled:
            return
        from impyard.gateway.server import Gateway
        from impyard.runs.control import BoxControl

        self.gateway = Gateway.start(
            self.policy.gateway,
            home=self.home,
            imp=self.manifest.imp,
            run_id=self.manifest.run_id,
            journal=self.ctx.journal,
            control=BoxControl(self) if self.manifest.checkout is not None else None,
            upstream_ca_file=self.policy.box.extra_ca_file,
        )

    def attach_gateway(self, pid: int) -> None:
        if self.gateway is None:
            return
        with self.phase("gateway"):
            self.gateway.attach(pid)
            write_ready(self.home.run_signal_dir(self.manifest.run_id))

    def close_gateway(self) -> None:
        if self.gateway is not None:
            self.gateway.close()

    def wait_box(self, timeout_seconds: float) -> BoxExit:
        container = self.manifest.container_id
        assert container is not None
        log_path = self.home.box_log(self.manifest.run_id)
        with self.phase("box"):
            box_exit = wait_box(
                container, timeout_seconds, log_path, self.log_follower, remove=False
            )
        # Removing the box and its volume (engine work) overlaps recording the exit and
        # the checkpoint; ``finish`` waits for it before it releases the run's space.
        self.teardown = Beside("box-teardown", self.remove_box_and_volume)
        return box_exit

    def remove_box_and_volume(self) -> None:
        assert self.manifest.container_id is not None
        remove_box(self.manifest.container_id)
        self.drop_volume()

    def record_exit(self, box_exit: BoxExit, interrupted: str | None = None) -> bool:
        """Record how the box ended; True when it is a clean exit that may be checkpointed."""
        if interrupted is None and self.manifest.run_id in self.ctx.killed_runs:
            interrupted = "killed by the host (serve shutdown)"
        clean = interrupted is None and box_exit.clean
        usage = self.tmp_watch.stop()
        runtime = self.manifest.runtime or "runc"  # under runsc the watch sees the whole box
        if box_exit.oom_killed and runtime == "runc":
            self.manifest.oom_tmp_bytes = usage.peak_bytes if usage else None
        reason = None
        if not clean:
            memory = self.policy.box.memory_bytes
            from impyard.runs import endings

            reason = interrupted or endings.exit_reason(box_exit, memory, usage, runtime)
            reason += endings.space_full_note(self.manifest)
        self.event(
            "box.exited",
            exit_code=box_exit.exit_code,
            oom_killed=box_exit.oom_killed,
            timed_out=box_exit.timed_out,
        )
        self.manifest.exited(box_exit, reason)
        self.save()
        return clean

    def drop_volume(self) -> None:
        if self.manifest.volume:
            remove_volume(self.manifest.volume)

    def checkpoint(self) -> None:
        from impyard.runs import endings

        endings.checkpoint(self)

    def quarantine(self) -> None:
        from impyard.runs import endings

        endings.quarantine_run(self)

    def finish(self, checkpoint: Checkpoint, **outcome: Any) -> None:
        self.manifest.timings_ms["total"] = round((time.monotonic() - self._t0) * 1000, 1)
        self.manifest.finished(checkpoint, names.utc_now(), **outcome)
        self.save()
        self.release_lease()
        self.wait_teardown()
        from impyard.runs import endings

        endings.release_run_space(self.home, self.manifest)

    def wait_teardown(self) -> None:
        """The box and its volume are gone (their removal ran beside the ending), and the
        spare space is made."""
        spare, self.spare = self.spare, None
        if spare is not None:
            spare.result()
        teardown, self.teardown = self.teardown, None
        if teardown is not None:
            teardown.result()

    def release_lease(self) -> None:
        if self.manifest.mode != "reorganize":
            return
        with opened(self.home.db) as conn:
            released = leases.release(conn, self.manifest.imp, self.manifest.run_id)
        if released:
            self.event("lease.released")


def _make_spare(home: Home, space: RunSpace) -> None:
    """Only a speed-up: a spare that cannot be made is formatted by the run that needs it."""
    try:
        runspace.make_spare(home, space.size_bytes)
    except Exception as exc:  # a full disk, a missing tool: the next run formats its own
        log.warning("could not format a spare run space: %s", exc)


#: Loaded beside a box's start: the exit checkpoint, the lane and what they use.
ENDING_MODULES = ("impyard.runs.endings",)
#: What the run's gateway needs, made once the box runs (first: it is needed first).
GATEWAY_MODULES = ("impyard.gateway.server", "impyard.runs.control")


def drive(run: Run, request: RunRequest) -> RunOutcome:
    """From a recorded manifest to a terminal one. A host interrupt kills the box and
    quarantines the run: a half-done box is never integrated."""
    try:
        try:
            run.prepare(request)
            run.start_box(request)
        except (Exception, KeyboardInterrupt) as exc:
            reason = "host interrupted" if isinstance(exc, KeyboardInterrupt) else str(exc)
            from impyard.runs import endings

            endings.quarantine_without_box(run, reason)
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
        run.close_gateway()
    if run.ctx.on_box_exited is not None:
        run.ctx.on_box_exited(run.manifest)
    from impyard.runs import endings

    try:
        endings.finish_after_exit(run, box_exit, interrupted)
    except BaseException:
        with contextlib.suppress(Exception):
            run.wait_teardown()
        raise
    return RunOutcome(run.manifest)
