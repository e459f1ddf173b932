"""``impyard candidates|quarantine rework``: the owner queues a follow-up task for the imp
whose run was refused; its box starts from the preserved files and its task quotes
every violation and the owner's note (see ``runs.provision.rework``). The preserved ref stays:
the rework lands through the lane like any run, and ``drop`` removes the ref after.

Dry run: the task that would be queued, built by the same ``plan_rework``, with the task
file its run would read and the files it would start from; nothing queued or recorded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, overload

from impyard.home import Home
from impyard.queue.tasks import Task
from impyard.repair import records
from impyard.repair.preserved import Kind
from impyard.runs.provision.rework import (
    NEW_NAMESPACE,
    ReworkPlan,
    plan_rework,
    preview_text,
    queue_rework,
)
from impyard.runs.records import manifest as manifests


@dataclass(frozen=True)
class ReworkPreview:
    """What ``rework`` would queue."""

    kind: Kind
    run_id: str
    plan: ReworkPlan
    #: The rework run's task file, as its box would read it.
    task_text: str
    #: The files its checkout would start with (path, and the path it had if renamed).
    files: list[dict[str, str]]
    #: Files of the preserved change it would not start with, and why.
    skipped: list[dict[str, str]]
    #: Paths the reworked run deleted (not repeated in the rework's checkout).
    deleted: list[str]

    def as_dict(self) -> dict[str, Any]:
        origin, link = self.plan.origin, self.plan.link
        return {
            "kind": self.kind,
            "run_id": self.run_id,
            "dry_run": True,
            "imp": self.plan.imp,
            "mode": self.plan.mode,
            "channel": self.plan.channel,
            "rework_of": link.of,
            "rework_root": link.root,
            "rework_attempt": link.attempt,
            "ref": origin.ref,
            "commit": origin.commit,
            "note": origin.note,
            "violations": [v.as_dict() for v in origin.violations],
            "violations_total": origin.violations_total,
            "prompt": self.plan.prompt,
            "task_text": self.task_text,
            # What the task text writes for the run's namespace, issued when it starts.
            "new_namespace": NEW_NAMESPACE,
            "files": self.files,
            "skipped": self.skipped,
            "deleted": self.deleted,
        }


@overload
def rework(
    home: Home, kind: Kind, run_id: str, note: str | None, *, dry_run: Literal[False] = False
) -> Task: ...
@overload
def rework(
    home: Home, kind: Kind, run_id: str, note: str | None, *, dry_run: Literal[True]
) -> ReworkPreview: ...
def rework(
    home: Home, kind: Kind, run_id: str, note: str | None, *, dry_run: bool = False
) -> Task | ReworkPreview:
    """Queue a rework of ``run_id``'s preserved ``kind``, recorded in its repairs;
    ``dry_run``: what that would queue, queueing and recording nothing."""
    with records.owning(home, run_id, claim=not dry_run) as m:
        if dry_run:
            plan = plan_rework(home, m, kind, note=note)
            text, seeded = preview_text(home, plan)
            files = [{"path": f.path, "was": f.was} for f in seeded.files]
            skipped = [{"path": path, "why": why} for path, why in seeded.skipped]
            return ReworkPreview(kind, run_id, plan, text, files, skipped, list(seeded.deleted))
        task = queue_rework(home, m, kind, note=note, by=records.acting_owner())
        manifests.write(home, m)
    return task
