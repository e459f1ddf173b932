"""``impyard candidates|quarantine rework``: the owner queues a follow-up task for the imp
whose run was refused; its box starts from the preserved files and its task quotes
every violation and the owner's note (see ``runs.rework``). The preserved ref stays:
the rework lands through the lane like any run, and ``drop`` removes the ref after."""

from __future__ import annotations

from impyard.home import Home
from impyard.queue.tasks import Task
from impyard.repair import records
from impyard.repair.preserved import Kind
from impyard.runs import manifest as manifests
from impyard.runs.rework import queue_rework


def rework(home: Home, kind: Kind, run_id: str, note: str | None) -> Task:
    """Queue a rework of ``run_id``'s preserved ``kind``, recorded in its repairs."""
    with records.owning(home, run_id) as m:
        task = queue_rework(home, m, kind, note=note, by=records.acting_owner())
        manifests.write(home, m)
    return task
