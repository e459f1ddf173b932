"""Overlay volumes for run checkouts, and the choice between overlay and copy.

An overlay checkout is a ``local``-driver volume of ``type=overlay``: dockerd
mounts it when the box starts and unmounts it at exit (observed on engine 20.10), the
box writes into the upper dir, and the base layer stays shared and read-only.
Whether that works depends on the engine, the kernel and the filesystem of the
data root, so it is probed once per engine and the answer cached.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from impyard.box.docker import engine
from impyard.box.docker.engine import EngineObjectNotFoundError, call
from impyard.box.launcher.helpers import helper_labels, holding
from impyard.box.spec import BoxMount, BoxSpec
from impyard.common.checkoutkind import CheckoutKind
from impyard.common.contract import DEFAULT_IMAGE, DEFAULT_USER, parse_user
from impyard.common.errors import ImpyardError
from impyard.common.fsutil import atomic_write_json, remove_tree
from impyard.home import Home

if TYPE_CHECKING:
    from impyard.settings import Settings


#: Per-home cache of probe answers, keyed by engine ID.
#: The uid/gid boxes run as by default; they must own the upper and work dirs.
BOX_UID, BOX_GID = parse_user(DEFAULT_USER)

_probed: dict[tuple[str, str], bool] = {}
_probe_lock = threading.Lock()


def create_overlay_volume(name: str, options: str, labels: dict[str, str]) -> str:
    """Create a ``local`` overlay volume; ``options`` is ``lowerdir=…,upperdir=…,workdir=…``.

    The engine accepts bad paths here and fails only when a box mounts the
    volume (HTTP 500 at start), so callers learn of a bad layer at start_box.
    """
    result = call(
        "volume create",
        engine.api().create_volume,
        name=name,
        driver="local",
        driver_opts={"type": "overlay", "device": "overlay", "o": options},
        labels=labels,
        volume=name,
    )
    return str(result.get("Name", name))


def remove_volume(name: str) -> None:
    """Remove a volume; already gone is fine. A volume still in use is an error."""
    with contextlib.suppress(EngineObjectNotFoundError):
        call("volume remove", engine.api().remove_volume, name, volume=name)


def prepare_upper(upper: Path, work: Path) -> None:
    """Create upper and work dirs the box user can write (overlay checks their owner)."""
    for path in (upper, work):
        path.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            os.chown(path, BOX_UID, BOX_GID)
        else:  # pragma: no cover - rootless hosts
            path.chmod(0o777)


def _features_path(home: Home) -> Path:
    return home.engine_features


def _read_cache(home: Home) -> dict[str, dict[str, object]]:
    try:
        value = json.loads(_features_path(home).read_text())
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _probe(base: Path, image: str) -> bool | None:
    """Mount an overlay volume in a real box, write through it, look for the file in upper.

    None: inconclusive (the probe box failed for reasons of its own).
    """
    root = Path(tempfile.mkdtemp(prefix=".overlay-probe-", dir=base))
    name = f"impyard-probe-{root.name.rsplit('-', 1)[-1].lower()}-{os.getpid()}"
    lock = root / "probe.lock"
    with holding(lock):
        return _probe_in(base, image, root, name, lock)


def _probe_in(base: Path, image: str, root: Path, name: str, lock: Path) -> bool | None:
    from impyard.box.launcher.launch import run_box

    try:
        lower, upper, work = root / "lower", root / "upper", root / "work"
        lower.mkdir()
        (lower / "base.txt").write_text("base\n")
        prepare_upper(upper, work)
        labels = helper_labels(base, lock, "overlay-probe", "overlay-probe", "-")
        create_overlay_volume(name, f"lowerdir={lower},upperdir={upper},workdir={work}", labels)
        spec = BoxSpec(
            image=image,
            command=["/bin/sh", "-c", "cat /k/base.txt && echo probe >/k/probe.txt"],
            labels=labels,
            mounts=[BoxMount(source=name, target="/k", read_only=False, kind="volume")],
            timeout_seconds=60,
        )
        try:
            exit_ = run_box(spec, root / "box.log")
        except engine.EngineCallError:
            return False  # HTTP 500 at start: the engine cannot mount the overlay
        if not exit_.clean:
            # The box itself failed (an odd image, a timeout): says nothing
            # about overlays, so not worth caching either way.
            return None
        return (upper / "probe.txt").is_file()
    finally:
        with contextlib.suppress(ImpyardError):
            remove_volume(name)
        with contextlib.suppress(OSError):
            remove_tree(root)  # the probe box wrote into it


def overlay_volumes_supported(home: Home, image: str = DEFAULT_IMAGE) -> bool:
    """Whether overlay checkout volumes work on this engine for this data root.

    Probed once (a real box writing through an overlay volume); the answer is
    cached in ``<home>/engine-features.json`` keyed by ``engine.engine_key()``
    (no ``docker info``: for a local daemon, two file reads), so later runs pay
    nothing. ``forget_overlay_support`` drops the answer when an overlay mount
    fails anyway. Without an existing data root the probe runs in a temp dir and
    nothing is cached.
    """
    engine_key = engine.engine_key()
    memo_key = (str(home.root), engine_key)
    with _probe_lock:
        if memo_key in _probed:
            return _probed[memo_key]
        cached = _read_cache(home).get(engine_key)
        if isinstance(cached, dict) and isinstance(cached.get("overlay_volumes"), bool):
            answer = bool(cached["overlay_volumes"])
        else:
            has_home = home.root.is_dir()
            probed = _probe(home.root if has_home else Path(tempfile.gettempdir()), image)
            answer = bool(probed)
            if probed is None:
                return False
            if has_home:
                cache = _read_cache(home)
                cache[engine_key] = {"overlay_volumes": answer, "probed_at": int(time.time())}
                atomic_write_json(_features_path(home), cache)
        _probed[memo_key] = answer
        return answer


def forget_overlay_support(home: Home) -> None:
    """An overlay mount failed although the cache said overlays work (the engine changed
    under a key that did not): drop every cached answer so the next run probes again."""
    with _probe_lock:
        _probed.clear()
        with contextlib.suppress(OSError):
            _features_path(home).unlink()


def select_checkout_kind(
    settings: Settings, home: Home, image: str = DEFAULT_IMAGE
) -> CheckoutKind:
    """``Settings.checkout`` when forced, else overlay if the engine supports it, else copy."""
    if settings.checkout == "overlay":
        return "overlay"
    if settings.checkout == "copy":
        return "copy"
    return "overlay" if overlay_volumes_supported(home, image) else "copy"
