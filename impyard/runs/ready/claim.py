"""A run on a ready box: claimed while the run prepares, handed the run at its start.

The claim happens before the checkout is made, so the checkout is written straight into
the directory the box already mounts; the task file, CA bundle and published origin are
put in place the same way (written in place, never renamed over: a bind mount holds the
inode it was started with). Once the run's gateway listens in the box's network
namespace, the claim file tells the box's gate what to run. No ready box of the run's
shape: the run starts a box of its own, as it always did.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shlex
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path

from impyard.box.spec import BoxMount, BoxSpec, StartedBox
from impyard.box.watch.logs import LogFollower
from impyard.common.fsutil import atomic_write_text
from impyard.gateway.wiring.boxside import BOX_SIGNAL_DIR, write_ready
from impyard.home import Home
from impyard.knowledge.checkouts import runspace
from impyard.runs.provision.boxspec import BOX_INIT, BOX_KNOWLEDGE, BOX_ORIGIN, box_spec
from impyard.runs.provision.taint import read_only_knowledge
from impyard.runs.ready import pool as warmpool
from impyard.runs.ready import prefill as warmprefill
from impyard.runs.ready.gate import CLAIM_FILE
from impyard.runs.ready.pool import PoolBox, PoolShape
from impyard.runs.records.active import ActiveRun
from impyard.runs.records.model import RunRequest

#: The size past which a file put in place is refused (a task or CA bundle is small).
_MAX_FILE_BYTES = 64 * 2**20
#: Passes over the origin's pack directory before a claim stops chasing folds (each
#: fold needs a lane pass, so a second pass almost never misses anything).
_PACK_PASSES = 8
#: Set when a run of this process claimed a ready box: serve's pool keeper refills at once
#: rather than at its next pass.
POOL_CLAIMED = threading.Event()


def wants_dir(home: Home) -> Path:
    """One record per imp using ready boxes: the shape of its last run (serve fills these)."""
    return home.warm_dir / "wants"


def run_shape(run: ActiveRun, request: RunRequest, image_id: str) -> PoolShape:
    """The shape of the box this run would start (its knowledge mount counted as a bind,
    in a space bounded as the run's own is, when the run's is)."""
    spec = box_spec(run.home, run.manifest, run.policy, request)
    mounts = [m for m in spec.mounts if m.target != BOX_KNOWLEDGE]
    space = 0
    if run.policy.knowledge.enabled:
        mounts.append(BoxMount(source="/", target=BOX_KNOWLEDGE, read_only=False))
        if run.manifest.space is not None and run.manifest.space.kind == "loop":
            space = warmpool.space_bytes(run.policy.knowledge.max_repo_bytes)
    shape = PoolShape.of(BoxSpec(**{**spec.__dict__, "mounts": mounts}), image_id)
    return replace(shape, space_bytes=space)


class WarmClaim:
    """The ready box a run claimed, until the box runs the run's command."""

    def __init__(
        self, run: ActiveRun, box: PoolBox, image_id: str, before: Callable[[], object]
    ) -> None:
        self.run, self.box, self.image_id, self.before = run, box, image_id, before
        self.t0 = time.monotonic()
        #: The box already holds the run's checkout (its imp's main, copied while serve
        #: was idle): the run copies nothing.
        self.prefilled = warmprefill.prefilled(box) is not None

    @property
    def knowledge(self) -> Path:
        return self.box.source(BOX_KNOWLEDGE)

    def start(self, spec: BoxSpec, log_path: Path, request: RunRequest) -> StartedBox:
        """Put the run's files in place; the box's output is followed from here on."""
        for mount in spec.mounts:
            if mount.target == BOX_ORIGIN:
                _link_origin(Path(mount.source), self.box.source(BOX_ORIGIN))
            elif mount.target in warmpool.FILE_TARGETS:
                _write_in_place(Path(mount.source), self.box.source(mount.target))
        follower = LogFollower.attach(self.box.container_id, log_path)
        self.before()
        return StartedBox(self.box.container_id, self.image_id, follower)

    def release(self, spec: BoxSpec) -> None:
        """The gateway listens: tell the box to run the run's command with its environment."""
        signal = self.box.source(BOX_SIGNAL_DIR)
        if self.run.policy.gateway.enabled:
            write_ready(signal)
        lines = [f"export {k}={shlex.quote(v)}" for k, v in sorted(spec.environment().items())]
        argv = [*_entrypoint(spec), *spec.command]
        lines.append("exec " + " ".join(shlex.quote(a) for a in argv))
        atomic_write_text(signal / CLAIM_FILE, "\n".join(lines) + "\n", durable=False)
        (signal / CLAIM_FILE).chmod(0o644)
        m = self.run.manifest
        m.timings_ms["claim"] = round((time.monotonic() - self.t0) * 1000, 1)


def _entrypoint(spec: BoxSpec) -> list[str]:
    """The cold box's entrypoint, less box-init: it only waits for the gateway's ready
    file, which ``release`` writes before the claim, and its exec cost 25-30 ms a run
    under gVisor."""
    entrypoint = list(spec.entrypoint or [])
    return entrypoint[1:] if entrypoint[:1] == [BOX_INIT] else entrypoint


def claim_warm(
    run: ActiveRun,
    request: RunRequest,
    image_id: Callable[[], str],
    before_start: Callable[[], object],
) -> WarmClaim | None:
    """A ready box of this run's shape, now the run's (None: the policy keeps none, or
    none is ready). Either way the imp's shape is recorded for serve to keep filled."""
    if run.policy.box.warm.boxes <= 0 or run.manifest.node is not None:
        return None
    if read_only_knowledge(run.manifest, run.limits):
        return None  # its read-only checkout is another shape: not the imp's usual one
    shape = run_shape(run, request, image_id())
    record_want(run.home, run.manifest.imp, shape)
    m = run.manifest
    fits = functools.partial(warmprefill.fits, imp=m.imp, base=m.base_commit)
    box = warmpool.claim(run.home, shape.key, m.run_id, fits)
    if box is not None:
        POOL_CLAIMED.set()
    run.manifest.warm_pool = shape.key
    run.event("warm.hit" if box is not None else "warm.miss", pool=shape.key)
    if box is None:
        return None
    m.warm, m.container_name = True, box.name  # recovery finds the box by this name
    own, m.space = m.space, box.space or m.space
    run.save()
    if own is not None and m.space is not own:
        # The box's space is the run's from here on (kept, read and released as a cold
        # run's is); the one admission gave the run was never used.
        runspace.release(own)
    return WarmClaim(run, box, shape.image_id, before_start)


def wants(home: Home) -> dict[str, PoolShape]:
    """imp -> the shape its last run recorded (an unreadable record is skipped)."""
    found: dict[str, PoolShape] = {}
    for path in sorted(wants_dir(home).glob("*.json")):
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            found[path.stem] = PoolShape.from_dict(json.loads(path.read_text()))
    return found


def record_want(home: Home, imp: str, shape: PoolShape) -> None:
    path = wants_dir(home) / f"{imp}.json"
    text = json.dumps(asdict(shape), sort_keys=True)
    try:
        if path.read_text() == text:
            os.utime(path)  # when the imp last asked: serve fills new boxes for the latest
            return
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, text)


def _write_in_place(source: Path, target: Path) -> None:
    """Copy ``source`` over the bind-mounted ``target`` without replacing its inode."""
    with source.open("rb") as src:
        data = src.read(_MAX_FILE_BYTES + 1)
    if len(data) > _MAX_FILE_BYTES:
        raise OSError(f"{source}: larger than {_MAX_FILE_BYTES} bytes")
    fd = os.open(target, os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def _link_origin(source: Path, target: Path) -> None:
    """Hard-link the published origin into ``target`` (the box mounts it read-only); a
    file the lane replaces later is a new inode, so the box's view stays one publication.

    The lane may publish, or fold loose objects and small packs into a new pack
    (``knowledge.store.fold``), meanwhile, so the order keeps the copy whole: refs first (the
    main the box sees), then loose objects, then packs; an object that vanished was
    folded into a pack written before it went, and the pack directory is linked again
    until a pass misses nothing."""
    _link_tree(source, target, skip="objects")
    objects, into = source / "objects", target / "objects"
    with contextlib.suppress(FileExistsError):
        os.mkdir(into, 0o755)
    _link_tree(objects, into, skip="pack")
    with contextlib.suppress(FileExistsError):
        os.mkdir(into / "pack", 0o755)
    for _ in range(_PACK_PASSES):
        if not _link_tree(objects / "pack", into / "pack"):
            return


def _link_tree(source: Path, target: Path, skip: str | None = None) -> int:
    """Hard-link ``source``'s tree into ``target`` (``skip``: a top-level name left out);
    how many entries vanished before they were linked. Plain strings and ``scandir``, not
    ``Path``: this is on a warm run's way to its box, and an origin holds a directory per
    loose-object prefix."""
    missed = 0
    root = os.fspath(source)
    stack = [(root, os.fspath(target))]
    while stack:
        src, dst = stack.pop()
        try:
            with os.scandir(src) as listing:
                entries = [e for e in listing if not (src == root and e.name == skip)]
        except FileNotFoundError:
            missed += 1
            continue
        for entry in entries:
            if entry.is_symlink():
                continue
            if entry.is_dir(follow_symlinks=False):
                with contextlib.suppress(FileExistsError):
                    os.mkdir(f"{dst}/{entry.name}", 0o755)
                stack.append((entry.path, f"{dst}/{entry.name}"))
                continue
            try:
                os.link(entry.path, f"{dst}/{entry.name}", follow_symlinks=False)
            except FileNotFoundError:
                missed += 1
            except FileExistsError:
                pass  # linked by an earlier pass
    return missed
