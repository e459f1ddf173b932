"""A stand-in for the pipeline's ``Run``: what the run's endings and ``BoxControl`` use of
it, over a real data root and a real copy checkout (no engine, no box)."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from impyard.home import Home
from impyard.knowledge.change import KnowledgeLimits
from impyard.knowledge.checkouts.checkout import prepare_checkout
from impyard.knowledge.imps import open_repo
from impyard.knowledge.store.repo import main_commit
from impyard.runs.records import manifest as manifests
from impyard.runs.records.model import Manifest, RunRequest
from tests.helpers.repo import NS, RUN, namespace, run_id


@dataclass
class FakeRun:
    """What ``endings.checkpoint``, ``endings.quarantine_run`` and ``BoxControl`` use."""

    home: Home
    manifest: Manifest
    limits: KnowledgeLimits = field(default_factory=KnowledgeLimits)
    policy: Any = field(
        default_factory=lambda: SimpleNamespace(
            knowledge=SimpleNamespace(checkpoint_on_clean_exit=True),
            review=SimpleNamespace(rework_attempts=0),
        )
    )
    checkpoint_lock: threading.Lock = field(default_factory=threading.Lock)
    manifest_lock: threading.RLock = field(default_factory=threading.RLock)
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    finished: dict[str, Any] = field(default_factory=dict)

    def save(self) -> None:
        pass

    def event(self, name: str, **fields: Any) -> None:
        self.events.append((name, fields))

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        yield

    def finish(self, checkpoint: str, **outcome: Any) -> None:
        self.finished = {"checkpoint": checkpoint, **outcome}


def running(home: Home, imp: str = "yuko") -> tuple[FakeRun, Path]:
    """A running run of ``imp`` with a copy checkout of main; it and the checkout root."""
    base = main_commit(open_repo(home, imp))
    checkout = prepare_checkout(home, imp, RUN, base, "copy", "65532:65532")
    manifest = Manifest(
        run_id=RUN,
        imp=imp,
        task_id=None,
        channel=None,
        mode="append",
        base_commit=base,
        namespace=NS,
        state="running",
        checkout=checkout,
    )
    return FakeRun(home, manifest), checkout.root


def write_run(home: Home, run_id: str, imp: str = "yuko", **fields: Any) -> Manifest:
    """A run record on disk, as the pipeline writes it: ``runs/<run_id>/manifest.json``."""
    defaults: dict[str, Any] = {
        "task_id": None,
        "channel": None,
        "mode": "append",
        "base_commit": "0" * 40,
        "namespace": NS,
    }
    manifest = Manifest(run_id=run_id, imp=imp, **(defaults | fields))
    home.run_dir(run_id).mkdir(parents=True, exist_ok=True)
    manifests.write(home, manifest)
    return manifest


def manifest_for(request: RunRequest, number: int, **fields: Any) -> Manifest:
    """The record of ``request`` run as run ``number`` (its run id and namespace made from
    the number), an append on a null base; ``fields`` set the rest."""
    return Manifest(
        run_id=run_id(number),
        imp=request.imp,
        task_id=request.task_id,
        channel=None,
        mode="append",
        base_commit="0" * 40,
        namespace=namespace(number),
        **fields,
    )


def allocated_bytes(root: Path) -> int:
    """Bytes allocated on ``root``'s own disk under it (sparse files count what they hold;
    a mounted run space counts by its image file, not again by what it holds), links not
    followed."""
    total = 0
    device = os.lstat(root).st_dev
    for dirpath, dirnames, filenames in os.walk(root):
        for name in list(dirnames):
            st = os.lstat(os.path.join(dirpath, name))
            if st.st_dev != device:
                dirnames.remove(name)
            else:
                total += st.st_blocks * 512
        for name in filenames:
            total += os.lstat(os.path.join(dirpath, name)).st_blocks * 512
    return total
