"""Ready boxes: pool boxes started before their run, each claimed by exactly one run.

A pool box runs with the hardening and limits its cold box would have, and the same
mount targets, each bound to an empty directory or file of its own under
``<root>/warm/<key>/<name>/``. Its command is a gate (POSIX sh) that waits for a claim
file in its read-only signal dir and sources it: the claim exports the run's
environment and execs the run's command, so the box's exit, output, OOM flag and
timeout are the run's own and ``launch.wait_box`` works unchanged. A gate was chosen over
``docker exec``: an exec'd process is not the box's first process, its exit is not the
container's, and the engine keeps no OOM or timeout record for it.

One rename claims a box (``ready`` -> ``claimed`` in its directory): of a foreground
``impyard run`` and ``serve`` racing for the same box, exactly one rename succeeds.

The knowledge mount's source is in the box's own writable space (``space``: a loop
filesystem of the size a cold run's copy checkout gets, made before the box starts and
counted by admission as a run's is), so a warm box that writes too much fills its own
space, never the data root.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from impyard.box.docker.engine import EngineObjectNotFoundError, api, call
from impyard.box.images.trust import BOX_CA_BUNDLE
from impyard.box.launcher.launch import find_boxes, remove_box, start_box
from impyard.box.spec import LABEL_ROOT, BoxMount, BoxSpec, Runtime, box_labels, root_label
from impyard.common.contract import parse_user
from impyard.common.fsutil import atomic_write_text, locked, remove_tree
from impyard.gateway.wiring.boxside import BOX_SIGNAL_DIR
from impyard.home import Home
from impyard.knowledge.checkouts import runspace
from impyard.knowledge.checkouts.runspace import RunSpace
from impyard.runs.provision.boxspec import BOX_KNOWLEDGE, BOX_TASK
from impyard.runs.ready.gate import CLAIM_FILE, gate_command
from impyard.runs.records import manifest

LABEL_WARM = "impyard.warm"
#: Fills a new box's knowledge dir (box dir, knowledge dir) before the box starts.
Filler = Callable[[Path, Path], object]
#: Under ``warm/``: the directories of finished runs' boxes, on their way out.
TRASH = ".trash"
#: The imp label of a pool box: it serves no imp until it is claimed.
POOL_IMP = "-"
#: Mount targets that are files (the rest are directories).
FILE_TARGETS = (BOX_TASK, BOX_CA_BUNDLE)


@dataclass(frozen=True)
class PoolShape:
    """Everything fixed once a box runs: two runs whose shapes are equal may share a pool."""

    image_id: str
    image: str
    runtime: Runtime
    user: str
    memory_bytes: int
    cpus: float
    pids_limit: int
    network: str
    #: (target, read_only) of each mount, sorted.
    mounts: tuple[tuple[str, bool], ...]
    #: The size of the box's writable space (loop); 0: a plain directory, unbounded.
    space_bytes: int = 0

    @property
    def key(self) -> str:
        raw = json.dumps(asdict(self), sort_keys=True).encode()
        return hashlib.sha256(raw).hexdigest()[:16]

    @classmethod
    def of(cls, spec: BoxSpec, image_id: str) -> PoolShape:
        return cls(
            image_id=image_id,
            image=spec.image,
            runtime=spec.runtime,
            user=spec.user,
            memory_bytes=spec.memory_bytes,
            cpus=spec.cpus,
            pids_limit=spec.pids_limit,
            network=spec.network,
            mounts=tuple(sorted((m.target, m.read_only) for m in spec.mounts)),
        )

    @classmethod
    def from_dict(cls, raw: dict[str, object]) -> PoolShape:
        fields = dict(raw)
        fields["mounts"] = tuple((str(t), bool(r)) for t, r in raw["mounts"])  # type: ignore[attr-defined]
        return cls(**fields)  # type: ignore[arg-type]


@dataclass(frozen=True)
class PoolBox:
    key: str
    name: str
    dir: Path
    container_id: str
    created: float
    #: Its space's size (0: its knowledge dir is a plain directory).
    space_bytes: int = 0

    @property
    def space(self) -> RunSpace | None:
        """The box's space, which its run takes as its own once it claims the box."""
        return box_space(self.dir, self.space_bytes) if self.space_bytes else None

    def source(self, target: str) -> Path:
        """The host side of the box's mount at ``target``."""
        if target == BOX_KNOWLEDGE:
            return space_of(self.dir) / "knowledge"
        return self.dir / "mnt" / target.strip("/").replace("/", "_")


def space_bytes(max_repo_bytes: int) -> int:
    """A ready box's space: a cold run's copy checkout's (the checkout, and what the run
    may keep)."""
    return runspace.space_size(2 * max_repo_bytes)


def space_of(box_dir: Path) -> Path:
    return box_dir / "space"


def box_space(box_dir: Path, size_bytes: int = 0) -> RunSpace:
    return RunSpace("loop", space_of(box_dir), box_dir / "space.img", size_bytes)


def remove_box_dir(box_dir: Path) -> None:
    """A box's directory and its space (unmounted first: what is inside goes with it)."""
    runspace.unmount(box_space(box_dir))
    remove_tree(box_dir)


def pool_spec(home: Home, shape: PoolShape, name: str, box_dir: Path) -> BoxSpec:
    """The pool box: its cold box's values for everything fixed, its own mount sources."""
    probe = PoolBox(shape.key, name, box_dir, "", 0.0)
    mounts = [
        BoxMount(source=str(probe.source(t)), target=t, read_only=ro) for t, ro in shape.mounts
    ]
    return BoxSpec(
        image=shape.image,
        command=[],
        entrypoint=gate_command(shape.runtime),
        labels=box_labels(name, POOL_IMP, root=home.root, **{LABEL_WARM: shape.key}),
        user=shape.user,
        env={"HOME": "/tmp"},
        mounts=mounts,
        memory_bytes=shape.memory_bytes,
        cpus=shape.cpus,
        pids_limit=shape.pids_limit,
        runtime=shape.runtime,
        name=name,
    )


def start_pool_box(
    home: Home, shape: PoolShape, reserve_bytes: int = 0, fill: Filler | None = None
) -> PoolBox:
    """Start one ready box of ``shape``; it is claimable once this returns. Its space is
    admitted only while the data root keeps ``reserve_bytes`` free besides. ``fill``
    (box dir, knowledge dir) fills the knowledge dir before the box starts."""
    name = f"impyard-warm-{shape.key[:8]}-{os.urandom(4).hex()}"
    box_dir = home.warm_dir / shape.key / name
    (box_dir / "mnt").mkdir(parents=True)
    spec = pool_spec(home, shape, name, box_dir)
    try:
        return _start(home, shape, spec, box_dir, reserve_bytes, fill)
    except BaseException:
        remove_box_dir(box_dir)
        raise


def _start(
    home: Home, shape: PoolShape, spec: BoxSpec, box_dir: Path, reserve: int, fill: Filler | None
) -> PoolBox:
    uid, gid = parse_user(shape.user)
    name = box_dir.name
    if shape.space_bytes:
        _make_space(home, box_dir, name, shape.space_bytes, reserve)
    for mount in spec.mounts:
        path = Path(mount.source)
        if mount.target in FILE_TARGETS:
            path.touch(mode=0o644)
            continue
        path.mkdir(mode=0o755, parents=mount.target == BOX_KNOWLEDGE)
        if mount.target == BOX_KNOWLEDGE:
            os.chown(path, uid, gid)  # as a cold checkout's root: the box user's
            if fill is not None:
                fill(box_dir, path)
    # The record first: a host that dies during the start leaves a dir reap finds.
    atomic_write_text(box_dir / "box.json", json.dumps({"shape": asdict(shape)}))
    started = start_box(spec, None, shape.image_id)
    box = PoolBox(shape.key, name, box_dir, started.container_id, time.time(), shape.space_bytes)
    record = {"shape": asdict(shape), "container_id": box.container_id, "created": box.created}
    atomic_write_text(box_dir / "box.json", json.dumps(record))
    (box_dir / "ready").touch()
    return box


def _make_space(home: Home, box_dir: Path, name: str, size_bytes: int, reserve: int) -> None:
    """The box's space, admitted against the data root's free space as a run's is (a
    DiskSpaceError leaves the pool a box short until space is freed)."""
    with locked(home.runs_dir / ".space.lock"):
        runspace.admit(home, size_bytes, reserve)
        runspace.reserve(home, name, size_bytes)
    try:
        runspace.create_at(home, box_dir / "space.img", space_of(box_dir), size_bytes)
    finally:
        runspace.unreserve(home, name)


def _load(box_dir: Path) -> PoolBox | None:
    try:
        raw = json.loads((box_dir / "box.json").read_text())
        space = int(raw.get("shape", {}).get("space_bytes") or 0)
        return PoolBox(
            box_dir.parent.name,
            box_dir.name,
            box_dir,
            raw["container_id"],
            raw["created"],
            space,
        )
    except (OSError, ValueError, KeyError):
        return None


def ready_boxes(home: Home, key: str | None = None) -> list[PoolBox]:
    """Ready (unclaimed) boxes, oldest first."""
    root = home.warm_dir
    keys = [key] if key is not None else _names(root)
    found = []
    for k in keys:
        for name in _names(root / k):
            box = _load(root / k / name) if (root / k / name / "ready").exists() else None
            if box is not None:
                found.append(box)
    return sorted(found, key=lambda b: b.created)


def _names(path: Path) -> list[str]:
    try:
        return sorted(
            p.name
            for p in path.iterdir()
            if p.is_dir() and not p.is_symlink() and not p.name.startswith(".")
        )
    except FileNotFoundError:
        return []


def take(box: PoolBox, holder: str = "") -> bool:
    """Claim ``box`` for one caller: True for exactly one of any number racing. ``holder``:
    the run that claimed it (none: the box is being removed)."""
    try:
        os.rename(box.dir / "ready", box.dir / "claimed")
    except FileNotFoundError:
        return False
    if holder:
        (box.dir / "claimed").write_text(holder)
    return True


def running(box: PoolBox) -> bool:
    try:
        info = call("inspect", api().inspect_container, box.container_id)
    except EngineObjectNotFoundError:
        return False
    return bool((info.get("State") or {}).get("Running"))


def claim(
    home: Home, key: str, run_id: str, fits: Callable[[PoolBox], bool] | None = None
) -> PoolBox | None:
    """The oldest ready, running box of pool ``key`` that ``fits`` the run, now run
    ``run_id``'s; a dead one met on the way is removed."""
    for box in ready_boxes(home, key):
        if (fits is not None and not fits(box)) or not take(box, run_id):
            continue
        if running(box):
            return box
        discard(box)
    return None


def discard(box: PoolBox) -> None:
    """Remove a box this caller took (or that no run holds) and its directory."""
    remove_box(box.container_id)
    remove_box_dir(box.dir)


def drain(
    home: Home, keep: dict[str, float], unwanted: Callable[[PoolBox], bool] | None = None
) -> int:
    """Remove every ready box whose pool is not in ``keep`` (key -> max age seconds), that
    is older than its pool's bound, that no run will take (``unwanted``), or that died
    while it waited; how many went."""
    now, gone = time.time(), 0
    for box in ready_boxes(home):
        max_age = keep.get(box.key)
        stale = max_age is None or now - box.created > max_age
        stale = stale or (unwanted is not None and unwanted(box)) or not running(box)
        if stale and take(box):
            discard(box)
            gone += 1
    return gone


def reap(home: Home) -> int:
    """Crash recovery: remove every pool box of this data root that no run claimed (no pool
    outlives its serve), and the directories of claimed boxes whose box is gone and whose
    checkout was released. Another data root's boxes are never touched."""
    gone = 0
    mine = root_label(home.root)
    for info in find_boxes({LABEL_ROOT: mine}):
        key = info.labels.get(LABEL_WARM)
        if key is None or info.run_id is None:
            continue
        box_dir = home.warm_dir / key / info.run_id
        if not (box_dir / "claimed").exists():
            remove_box(info.container_id)
            gone += 1
    live = {b.container_id for b in find_boxes({LABEL_ROOT: mine})}
    root = home.warm_dir
    remove_tree(root / TRASH)  # directories a run's ending moved out, not yet deleted
    for key in _names(root):
        for name in _names(root / key):
            box_dir = root / key / name
            box = _load(box_dir)
            claimed = (box_dir / "claimed").exists()
            if box is not None and box.container_id in live and claimed:
                continue
            if claimed and box is not None and keeps_checkout(box):
                continue  # the run's kept checkout (a quarantine) stays until gc releases it
            with contextlib.suppress(FileNotFoundError):
                remove_box_dir(box_dir)
    return gone


def keeps_checkout(box: PoolBox) -> bool:
    """Whether the box's directory still holds its run's checkout (its space's image, kept
    unmounted once the run is quarantined, or a plain knowledge dir)."""
    return (box.dir / "space.img").exists() or box.source(BOX_KNOWLEDGE).exists()


def forget_box_dir(home: Home, checkout_root: Path) -> None:
    """Remove the directory of the claimed box whose run's checkout is at ``checkout_root``
    (in its space: the knowledge dir, or the upper dir of the overlay mounted there), its
    run over, its box gone: moved out of the pools, deleted on a non-daemon thread (a run's
    end need not wait for its unlinks, its process does; a crash leaves it to reap)."""
    box_dir = checkout_root.parent.parent
    if box_dir.parent.parent != home.warm_dir or not (box_dir / "claimed").exists():
        return
    runspace.unmount(box_space(box_dir))
    trash = home.warm_dir / TRASH
    trash.mkdir(exist_ok=True)
    gone = trash / f"{box_dir.parent.name}-{box_dir.name}"
    os.rename(box_dir, gone)
    threading.Thread(target=remove_tree, args=(gone,), name="warm-box-dir", daemon=False).start()


def sweep_abandoned(home: Home) -> int:
    """Remove the boxes whose run claimed them and ended before it handed them its command
    (its checkout failed, say): no one else ever removes such a box. A run's kept checkout
    stays in the box's directory until gc releases it."""
    gone, root = 0, home.warm_dir
    for key in _names(root):
        for name in _names(root / key):
            box = _load(root / key / name)
            if box is None or (box.source(BOX_SIGNAL_DIR) / CLAIM_FILE).exists():
                continue  # not started, or its run's own box now
            try:
                holder = (box.dir / "claimed").read_text().strip()
            except FileNotFoundError:
                continue  # still ready
            run = manifest.read_or_none(home, holder) if holder else None
            if run is None or not run.is_terminal:
                continue
            remove_box(box.container_id)
            gone += 1
            if not keeps_checkout(box):
                remove_box_dir(box.dir)
    return gone
