"""What a running box may ask of its host through its gateway: a check of its checkout
as it is now (nothing is written), a mid-run checkpoint through the lane, a report
of its agent's step count (recorded in the manifest, shown by ``runs show``), and, from
a tainted run, a task filed for its imp (``runs.checkpoints.bridge``).

Both take the same snapshot as the exit checkpoint, while the box runs. A
checkpoint is recorded in the manifest as ``pending`` before the lane acts and
settled by recovery if the host dies meanwhile (``settle_pending``); a run has
one checkpoint at a time (``Run.checkpoint_lock``), and the exit checkpoint waits
for one in progress.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

from impyard import backup
from impyard.common import names
from impyard.gateway.proxy.control import ControlRefused
from impyard.runs.provision.taint import READ_ONLY, participant_violations, read_only_knowledge
from impyard.runs.records.model import MAX_LISTED, CheckpointRecord, Manifest

if TYPE_CHECKING:
    from impyard.knowledge.change import Change
    from impyard.runs.checkpoints.landing import LandedCache
    from impyard.runs.records.active import ActiveRun

log = logging.getLogger(__name__)

# How long a check waits for a checkpoint of the same run to finish before it is 409.
CHECK_WAIT_SECONDS = 30.0


class BoxControl:
    """The ``RunControl`` of one run (``impyard.gateway.proxy.control``)."""

    def __init__(self, run: ActiveRun) -> None:
        self.run = run
        self._landed: LandedCache | None = None
        self._filing = threading.Lock()

    @property
    def landed(self) -> LandedCache:
        from impyard.runs.checkpoints.landing import LandedCache

        if self._landed is None:
            self._landed = LandedCache()
        return self._landed

    def check(self) -> dict[str, Any]:
        # The snapshot and lane machinery load on a box's first request (and beside the
        # box's start, see ``Run.beside_box_start``), never before a box starts.
        from impyard.knowledge.checkouts.snapshot import CheckTooLarge, snapshot
        from impyard.knowledge.imps import open_repo
        from impyard.knowledge.validation.increments import split
        from impyard.knowledge.validation.rechecks import recheck
        from impyard.knowledge.validation.records import ORGANIZATION, RECORDS
        from impyard.knowledge.validation.validate import validate
        from impyard.knowledge.validation.violations import digest
        from impyard.runs.checkpoints.landing import run_receipts

        run = self.run
        if not run.checkpoint_lock.acquire(timeout=CHECK_WAIT_SECONDS):
            raise ControlRefused(409, "a checkpoint of this run is still in progress")
        try:
            m = self._running()
            assert m.checkout is not None
            repo = open_repo(run.home, m.imp)
            try:
                change = snapshot(repo, m.checkout, run.limits, store=False)
            except CheckTooLarge as exc:
                raise ControlRefused(413, str(exc)) from exc
            parts = split(change, self.landed.files(repo, m))
            violations = validate(
                repo,
                m.base_commit,
                parts.effective,
                namespace=m.namespace,
                mode=m.mode,
                limits=run.limits,
                receipts=run_receipts(run.home, m.run_id),
            )
            violations += parts.touched
            violations += participant_violations(run.home, m, change)  # tainted, any-run
            # What landed on main since the base, read only: a collision shows now.
            violations += recheck(
                repo, m.base_commit, parts.increment, m.namespace, m.mode, m.run_id
            )
        finally:
            run.checkpoint_lock.release()
        found = digest(violations)
        run.event("knowledge.checked", violations=found.total)
        return {
            "ok": not violations,
            "violations": found.kept,
            "violations_total": found.total,
            "records": _count_under(parts.effective, RECORDS),
            "organization_files": _count_under(parts.effective, ORGANIZATION),
        }

    def checkpoint(self) -> dict[str, Any]:
        run = self.run
        if not run.checkpoint_lock.acquire(blocking=False):
            raise ControlRefused(409, "a checkpoint of this run is already in progress")
        try:
            return self._checkpoint()
        finally:
            run.checkpoint_lock.release()

    def _checkpoint(self) -> dict[str, Any]:
        from impyard.knowledge.checkouts.snapshot import snapshot
        from impyard.knowledge.imps import open_repo
        from impyard.knowledge.validation.violations import digest
        from impyard.runs.checkpoints.landing import integrate_run, landed_paths, record_landed

        run = self.run
        m = self._running()
        assert m.checkout is not None
        number = m.next_checkpoint
        record = CheckpointRecord(number=number, requested_at=names.utc_now())
        with run.manifest_lock:
            m.checkpoints.append(record)
            run.save()
        try:
            repo = open_repo(run.home, m.imp)
            change = snapshot(repo, m.checkout, run.limits)
            result = integrate_run(
                run.home,
                m,
                change,
                run.limits,
                number=number,
                at_exit=False,
                landed=self.landed.files(repo, m),
            )
        except BaseException:
            with run.manifest_lock:
                if record.state == "pending":  # nothing landed that we know of
                    m.checkpoints.remove(record)
                    run.save()
            raise
        found = digest(result.violations)
        files: list[str] = []
        with run.manifest_lock:
            if result.checkpoint == "integrated" and result.commit is not None:
                files = landed_paths(repo, result.commit)
                record_landed(record, result.commit, files)
            else:
                m.checkpoints.remove(record)
            run.save()
        run.event(
            "knowledge.checkpointed",
            checkpoint=number if record.state == "integrated" else None,
            outcome=result.checkpoint,
            commit=result.commit,
            files=len(files),
            violations=found.total,
        )
        landed = record.state == "integrated"
        if landed:
            backup.notify(run.home, m.imp)
        return {
            "checkpoint": number if landed else None,
            "outcome": result.checkpoint,
            "commit": result.commit,
            "files": files[:MAX_LISTED],
            "violations": found.kept,
            "violations_total": found.total,
        }

    def report(self, agent_steps: int) -> dict[str, Any]:
        """Record the step count the box's agent adapter reports (the box's own word:
        shown as reported, trusted for nothing)."""
        run = self.run
        with run.manifest_lock:
            m = run.manifest
            if m.state != "running":
                raise ControlRefused(409, f"the run is {m.state}; it takes no report now")
            m.agent_steps = agent_steps
            run.save()
        return {"agent_steps": agent_steps}

    def file_task(self, body: bytes) -> dict[str, Any]:
        """File the task a tainted run asks for (the prompt is the body); a refusal is an
        answer with every reason, journaled, never an error: the box tool shows it."""
        from impyard.runs.checkpoints.bridge import file_task

        run = self.run
        m = run.manifest
        if m.state != "running":
            raise ControlRefused(409, f"the run is {m.state}; it files no task now")
        with self._filing:  # one at a time: the run's count is read, then added to
            filed = file_task(run.home, m, body)
            if filed.task_id is None:
                run.event("task.refused", reasons=list(filed.reasons), named=list(filed.named))
                return {"task": None, "reasons": list(filed.reasons)}
            with run.manifest_lock:
                m.filed_tasks.append(filed.task_id)
                run.save()
        run.event("task.filed", task=filed.task_id, prompt=filed.prompt, chars=len(filed.prompt))
        return {"task": filed.task_id, "reasons": []}

    def _running(self) -> Manifest:
        m = self.run.manifest
        if m.checkout is None:
            raise ControlRefused(409, "knowledge is disabled for this run: nothing to check")
        if m.state != "running":
            raise ControlRefused(409, f"the run is {m.state}; its exit checkpoint decides now")
        if read_only_knowledge(m, self.run.limits):
            raise ControlRefused(409, READ_ONLY)
        return m


def _count_under(change: Change, top: str) -> int:
    prefix = top + "/"
    return sum(1 for path in change.written if path.startswith(prefix))


__all__ = ["BoxControl"]
