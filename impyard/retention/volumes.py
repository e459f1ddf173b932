"""Engine volumes gc may remove: overlay checkout volumes of this data root whose run is
finished (or whose record is gone) and owned by no live process.

A run drops its volume when its box exits; one is left behind only by a host that died
in between. The engine is shared with other data roots, so a volume counts as this
root's only when its overlay upper dir lies under this root's ``runs/``; a volume of
another data root is never touched. An unreachable engine is not a gc failure: the
volumes are simply not looked at, and the plan says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from impyard.box.launcher.helpers import LeftHelper, left_helpers, remove_helper
from impyard.box.spec import LABEL_IMP, LABEL_RUN
from impyard.common.errors import EngineError, ImpyardError, NotFoundError
from impyard.common.names import RUN_ID
from impyard.home import Home
from impyard.retention.model import GcItem, GcOutcome, age_days
from impyard.runs.records import manifest as manifests
from impyard.runs.records.owner import RunOwnership


@dataclass(frozen=True)
class EngineVolume:
    name: str
    labels: dict[str, str] = field(default_factory=dict)
    #: The local driver's options (``o`` holds ``lowerdir=…,upperdir=…,workdir=…``).
    options: dict[str, str] = field(default_factory=dict)
    created_at: str | None = None


class VolumeStore(Protocol):
    """The engine's volumes and helpers, as gc needs them (tests pass a fake)."""

    def labelled(self) -> list[EngineVolume]:
        """Every volume labelled ``impyard.run``; EngineError when the engine cannot say."""
        ...

    def remove(self, name: str) -> None:
        """Remove a volume; NotFoundError when it is already gone, EngineError otherwise."""
        ...

    def left_helpers(self, root: Path) -> list[LeftHelper]:
        """The data root's helpers whose creator is gone (``box.launcher.helpers``); EngineError
        when the engine cannot say."""
        ...

    def remove_helper(self, left: LeftHelper) -> None:
        """Remove one; already gone is fine, EngineError otherwise."""
        ...


class EngineVolumes:
    """The real engine, through ``box.docker.engine.call``."""

    def labelled(self) -> list[EngineVolume]:
        from impyard.box.docker import engine

        answer: Any = engine.call("volume list", engine.api().volumes, filters={"label": LABEL_RUN})
        found = []
        for raw in (answer or {}).get("Volumes") or []:
            found.append(
                EngineVolume(
                    name=str(raw.get("Name")),
                    labels=dict(raw.get("Labels") or {}),
                    options=dict(raw.get("Options") or {}),
                    created_at=raw.get("CreatedAt"),
                )
            )
        return found

    def remove(self, name: str) -> None:
        from impyard.box.docker import engine

        engine.call("volume remove", engine.api().remove_volume, name, volume=name)

    def left_helpers(self, root: Path) -> list[LeftHelper]:
        return left_helpers(root)

    def remove_helper(self, left: LeftHelper) -> None:
        remove_helper(left)


def plan_volumes(home: Home, store: VolumeStore, now: float, notes: list[str]) -> list[GcItem]:
    try:
        volumes = store.labelled()
    except EngineError as exc:
        notes.append(f"engine volumes were not checked: {exc}")
        return []
    items = []
    for volume in sorted(volumes, key=lambda v: v.name):
        run = volume.labels.get(LABEL_RUN, "")
        if not RUN_ID.fullmatch(run) or not belongs_to(home, volume):
            continue
        why = unused_because(home, run)
        if why is None:
            continue
        items.append(
            GcItem(
                kind="volume",
                id=volume.name,
                path=volume.name,
                reason=f"no unfinished run uses it: {why}",
                age_days=age_days(now, _created(volume.created_at)),
                imp=volume.labels.get(LABEL_IMP),
                run=run,
            )
        )
    return items


def plan_helpers(home: Home, store: VolumeStore, notes: list[str]) -> list[GcItem]:
    """What a host that died while it had a helper on the engine left (``box.launcher.helpers``)."""
    try:
        found = store.left_helpers(home.root)
    except EngineError as exc:
        notes.append(f"engine helpers were not checked: {exc}")
        return []
    return [
        GcItem(
            kind="helper",
            id=left.name,
            path=left.what,
            reason=f"{left.kind} {left.what} its creator left behind",
            run=left.run or None,
        )
        for left in found
    ]


def remove_planned_helper(store: VolumeStore, item: GcItem) -> GcOutcome:
    what = "container" if item.path == "container" else "volume"
    left = LeftHelper(kind="", what=what, name=item.id, run=item.run or "")
    try:
        store.remove_helper(left)
    except ImpyardError as exc:
        return GcOutcome(item, "failed", str(exc))
    return GcOutcome(item, "removed")


def remove_planned_volume(home: Home, store: VolumeStore, item: GcItem) -> GcOutcome:
    """Remove one planned volume, if its run still does not need it."""
    if item.run is None or unused_because(home, item.run) is None:
        return GcOutcome(item, "skipped", "its run is in use again")
    try:
        store.remove(item.id)
    except NotFoundError:
        return GcOutcome(item, "skipped", "already gone")
    except ImpyardError as exc:  # in use by a container, or the engine went away
        return GcOutcome(item, "failed", str(exc))
    return GcOutcome(item, "removed")


def belongs_to(home: Home, volume: EngineVolume) -> bool:
    """Whether the volume's overlay upper dir is under this data root's ``runs/``."""
    for option in volume.options.get("o", "").split(","):
        key, _, value = option.partition("=")
        if key != "upperdir" or not value:
            continue
        upper = Path(value)
        runs = home.runs_dir
        return upper.is_relative_to(runs) or upper.is_relative_to(runs.resolve())
    return False


def unused_because(home: Home, run: str) -> str | None:
    """Why no live run needs the run's volume, or None when one may."""
    if not home.run_dir(run).is_dir():
        return "its run record is gone"
    try:
        manifest = manifests.read(home, run)
    except (OSError, ValueError, ImpyardError):
        return None  # a record being written, or unreadable: never guess
    if not manifest.is_terminal or RunOwnership.is_held(home, run):
        return None
    return f"its run is finished ({manifest.checkpoint})"


def _created(stamp: str | None) -> float | None:
    if not stamp:
        return None
    try:
        return datetime.fromisoformat(stamp).timestamp()
    except ValueError:
        return None
