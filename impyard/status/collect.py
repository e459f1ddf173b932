"""Gather every section of ``impyard status`` and judge it: problems and warnings."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

from impyard.box.images.agents import build_hint
from impyard.common.errors import ImpyardError
from impyard.home import Home
from impyard.knowledge.imps import list_imps
from impyard.policy.compile import deployed_org_policy
from impyard.preflight import policy_findings
from impyard.settings import Settings
from impyard.status.backup import backup_section
from impyard.status.cluster import cluster_section
from impyard.status.disk import MIN_FREE_RATIO, Statvfs, disk_section
from impyard.status.engine import DockerProbe, EngineProbe, engine_status, image_statuses
from impyard.status.images import named_images
from impyard.status.knowledge import imp_knowledge
from impyard.status.model import (
    DiskSection,
    EngineStatus,
    ImageStatus,
    PolicySection,
    Problem,
    RunningRun,
    Status,
)
from impyard.status.policy import policy_section
from impyard.status.units import human_bytes, iso
from impyard.status.warm import warm_section
from impyard.status.work import queue_and_leases, serve_section, unfinished_runs


def _disk_parts(home: Home, imps: list[str]) -> dict[str, list[Path]]:
    return {
        "runs": [home.runs_dir],
        "layers": [home.layers(imp) for imp in imps],
        "archive": [home.archive_dir],
        "repos": [path for imp in imps for path in (home.repo(imp), home.origin(imp))],
    }


def collect(
    home: Home,
    settings: Settings,
    *,
    probe: EngineProbe | None = None,
    min_free_ratio: float | None = None,
    statvfs: Statvfs | None = None,
    now: datetime | None = None,
) -> Status:
    """The status of ``home`` now. ``probe`` stands in for the engine (default: the real
    one), ``statvfs`` for the data root's filesystem; ``min_free_ratio`` is the share of
    free space under which the disk is a problem (default ``MIN_FREE_RATIO``)."""
    now = now or datetime.now(UTC)
    probe = probe or DockerProbe()
    min_free_ratio = MIN_FREE_RATIO if min_free_ratio is None else min_free_ratio
    imps = list_imps(home)
    engine = engine_status(probe)
    images = image_statuses(probe, named_images(home, imps), engine.reachable)
    disk = disk_section(
        home.root,
        _disk_parts(home, imps),
        min_free_ratio=min_free_ratio,
        statvfs=statvfs or os.statvfs,
    )
    status = judged_status(
        home, settings, now, imps, engine, images, runs=unfinished_runs(home, now), disk=disk
    )
    # Overlays may only keep the org's routes, so the org's are every route a run can use.
    status.warnings.extend(
        Problem(code=f.code, message=f.message)
        for f in policy_findings(deployed_org_policy(home).gateway)
    )
    return status


def judged_status(
    home: Home,
    settings: Settings,
    now: datetime,
    imps: list[str],
    engine: EngineStatus,
    images: list[ImageStatus],
    *,
    runs: list[RunningRun],
    disk: DiskSection,
) -> Status:
    """The sections every status view shows, gathered now around the engine, images, runs
    and disk the caller asked for (each view asks those its own way), and judged."""
    queue, leases = queue_and_leases(home, settings.lease_ttl_seconds, now)
    knowledge = [imp_knowledge(home, imp) for imp in imps]
    status = Status(
        home=str(home.root),
        generated_at=iso(now),
        engine=engine,
        images=images,
        serve=serve_section(home),
        queue=queue,
        runs=runs,
        leases=leases,
        knowledge=knowledge,
        backup=backup_section(home, len(deployed_org_policy(home).backup.remotes), knowledge),
        disk=disk,
        policy=policy_section(home),
        cluster=cluster_section(home),
        warm=warm_section(home),
    )
    judge(status)
    return status


def judge(status: Status) -> None:
    """Fill ``problems`` (the command fails) and ``warnings`` from the sections."""
    problems, warnings = status.problems, status.warnings
    if not status.engine.reachable:
        problems.append(Problem(code="engine-down", message=status.engine.error or "unreachable"))
    if status.cluster.enabled and not any(n.state == "ready" for n in status.cluster.nodes):
        warnings.append(
            Problem(
                code="cluster-no-node",
                message="[cluster] is enabled and no node is ready: runs wait, then fail "
                "(`impyard cluster status`)",
            )
        )
    for image in status.images:
        if image.state == "missing":
            problems.append(
                Problem(
                    code="image-missing",
                    message=f"{image.image} (named by {', '.join(image.used_by)}) is not in "
                    f"the engine: {build_hint(image.image)}",
                )
            )
    if status.queue.error:
        code = "queue-locked" if status.queue.locked else "queue-unreadable"
        problems.append(Problem(code=code, message=status.queue.error))
    for imp in status.knowledge:
        if imp.error:
            problems.append(Problem(code="knowledge-unreadable", message=imp.error))
    _judge_backup(status)
    disk = status.disk
    if disk.error:
        warnings.append(Problem(code="disk-unreadable", message=disk.error))
    elif disk.free_ratio < disk.min_free_ratio:
        problems.append(
            Problem(
                code="disk-low",
                message=f"the data root's filesystem has {disk.free_ratio:.1%} free "
                f"({human_bytes(disk.free_bytes)} of {human_bytes(disk.total_bytes)}), "
                f"under {disk.min_free_ratio:.0%}",
            )
        )
    if not status.policy.deployed:
        problems.append(Problem(code="policy-not-deployed", message=_undeployed(status.policy)))
    if status.serve.stale_pids:
        pids = ", ".join(str(pid) for pid in status.serve.stale_pids)
        warnings.append(
            Problem(
                code="serve-died",
                message=f"serve (pid {pids}) ended without stopping cleanly; "
                "the next serve recovers its runs",
            )
        )


#: Refused policy lines a status problem names; ``impyard deploy`` lists every one.
SHOWN_VIOLATIONS = 3


def _undeployed(policy: PolicySection) -> str:
    changed = "; ".join(policy.changes)
    if not policy.invalid:
        return f"{changed}: run `impyard deploy`"
    shown = policy.invalid[:SHOWN_VIOLATIONS]
    more = len(policy.invalid) - len(shown)
    rest = f"; and {more} more (`impyard deploy` lists every one)" if more else ""
    fix = "fix it" if len(policy.invalid) == 1 else "fix them"
    refused = "; ".join(shown) + rest
    return f"{changed}, and a deploy would refuse it: {refused}: {fix}, then run `impyard deploy`"


def _judge_backup(status: Status) -> None:
    backup = status.backup
    if backup.error:
        status.warnings.append(Problem(code="backup-status-unreadable", message=backup.error))
    for imp in backup.imps:
        if imp.never_backed_up:
            status.warnings.append(
                Problem(
                    code="backup-never",
                    message=f"imp {imp.imp} was never backed up "
                    f"({backup.configured_remotes} remote(s) configured)",
                )
            )
        for remote in imp.remotes:
            if remote.state == "failing":
                since = f" since {remote.failing_since}" if remote.failing_since else ""
                error = (remote.last_error or "").splitlines()
                status.problems.append(
                    Problem(
                        code="backup-failing",
                        message=f"backup of {imp.imp} to {remote.remote} failing{since}"
                        + (f": {error[0]}" if error else ""),
                    )
                )
            elif remote.state == "lagging":
                behind = (
                    f"{remote.behind} commit(s) behind main"
                    if remote.behind is not None
                    else "behind main"
                )
                status.warnings.append(
                    Problem(
                        code="backup-lagging",
                        message=f"backup of {imp.imp} to {remote.remote} is {behind} "
                        f"(last pushed {remote.pushed_at or 'never'})",
                    )
                )


class StatusProblemsError(ImpyardError):
    """``impyard status`` found problems (the screen was shown; this is its exit)."""

    def __init__(self, problems: list[Problem]) -> None:
        codes = ", ".join(dict.fromkeys(p.code for p in problems))
        super().__init__(f"{len(problems)} problem(s): {codes}")
        self.problems = problems
