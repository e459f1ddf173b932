"""An imp's life after ``imp create``: change its box settings, remove it.

Removing keeps the knowledge unless asked: the imp's directory (canonical repository,
published origin, settings, layers) is renamed to ``removed/<imp>-<UTC stamp>/`` in the
same data root, one atomic rename, so the imp is no longer listed or runnable and its
knowledge is still there to read, clone or move back. Its memory, its policy overlay and
its backups on the remotes are left as they are.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

from impyard.common.errors import EngineError, ImageNotFoundError, UsageError
from impyard.common.fsutil import atomic_write_json, fsync_dir, locked, remove_tree
from impyard.home import Home
from impyard.journal.log import Journal
from impyard.knowledge.checkouts.layer_image import unmount_images
from impyard.knowledge.checkouts.layer_store import layers_lock
from impyard.knowledge.imps import ImpSettings, read_imp_settings, require_imp


def settings_with(
    current: ImpSettings, *, image: str | None, command: str | None, agent: str | None
) -> ImpSettings:
    """``current`` with the options given applied; an empty string clears a setting (the
    policy's box.image or box.command applies again). An agent brings its own command
    and, unless ``image`` is given, its image."""
    from impyard.box.images.agents import agent_named

    if agent is not None and command is not None:
        raise UsageError("--agent sets the command; leave out --command")
    settings = current
    if agent is not None:
        if agent == "":
            settings = replace(settings, agent=None)
        else:
            chosen = agent_named(agent)
            settings = ImpSettings(image=chosen.image, command=chosen.command, agent=agent)
    if command is not None:
        # A command of the owner's replaces the agent's: the imp no longer runs that agent.
        settings = replace(settings, command=command or None, agent=None)
    if image is not None:
        settings = replace(settings, image=image or None)
    return settings


def require_image(image: str) -> None:
    """Refuse an image the engine does not have: nothing is pulled here, so every run of an
    imp set to it would end quarantined. An engine that cannot be asked refuses too (the
    error says so): an unchecked image would fail only later, in a run."""
    from impyard.box.docker.engine import engine_url
    from impyard.box.images.agents import build_hint
    from impyard.box.launcher.launch import resolve_image

    try:
        resolve_image(image)
    except ImageNotFoundError:
        raise ImageNotFoundError(
            f"image {image} is not in the Docker engine at {engine_url()} and nothing is "
            f"pulled here: {build_hint(image)}, then set it again"
        ) from None
    except EngineError as exc:
        raise EngineError(
            f"cannot check that image {image} is in the engine, so it is not set: {exc.message}"
        ) from exc


def set_imp_settings(
    home: Home, imp: str, *, image: str | None, command: str | None, agent: str | None
) -> ImpSettings:
    """Write the imp's new settings (atomically); the next run uses them."""
    current = read_imp_settings(home, imp)
    if image is None and command is None and agent is None:
        raise UsageError("nothing to set: give --image, --command or --agent")
    settings = settings_with(current, image=image, command=command, agent=agent)
    if image:
        require_image(image)
    atomic_write_json(home.imp_settings(imp), settings.as_dict())
    Journal(home.journal).record("imp.settings", imp=imp, **settings.as_dict())
    return settings


@dataclass(frozen=True)
class Removal:
    imp: str
    moved_to: Path | None  # None when purged
    purged: bool

    def as_dict(self) -> dict[str, object]:
        return {
            "imp": self.imp,
            "moved_to": None if self.moved_to is None else str(self.moved_to),
            "purged": self.purged,
        }


def live_work(home: Home, imp: str) -> list[str]:
    """What of ``imp`` is still live: queued or running tasks, unfinished runs."""
    from impyard.queue import tasks
    from impyard.queue.db import connect
    from impyard.status.work import unfinished_runs

    found = [
        f"run {run.run_id} is {run.state}"
        for run in unfinished_runs(home, datetime.now(UTC))
        if run.imp == imp
    ]
    if home.db.exists():
        conn = connect(home.db)
        try:
            for state in ("queued", "running"):
                found += [
                    f"task {t.id} is {state}" for t in tasks.list_tasks(conn, state) if t.imp == imp
                ]
        finally:
            conn.close()
    return found


def remove_imp(home: Home, imp: str, *, purge: bool) -> Removal:
    """Move the imp aside under ``removed/`` (and delete it there when ``purge``); refuse
    while any of its runs or tasks is live, naming each."""
    require_imp(home, imp)
    live = live_work(home, imp)
    if live:
        raise UsageError(
            f"imp {imp!r} has live work: {'; '.join(live)} (cancel its tasks or wait "
            "for its runs to finish, then remove it)"
        )
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    home.removed_dir.mkdir(exist_ok=True)
    target = home.removed_dir / f"{imp}-{stamp}"
    # The lane lock: an integration of this imp finishes before its directory moves.
    with locked(home.lane_lock(imp)):
        # Layer images are mounted where they are: the moved imp holds plain files only.
        if home.layers(imp).is_dir():
            with layers_lock(home, imp):
                unmount_images(home.layers(imp))
        os.rename(home.imp_dir(imp), target)
        fsync_dir(home.knowledge_dir)
        fsync_dir(home.removed_dir)
    Journal(home.journal).record(
        "imp.removed", imp=imp, moved_to=None if purge else str(target), purged=purge
    )
    if purge:
        remove_tree(target)
        return Removal(imp, None, True)
    return Removal(imp, target, False)
