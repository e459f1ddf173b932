"""Ready boxes as ``impyard status`` and the console show them: each pool's ready and
wanted boxes, and the hits, misses and claim times of the most recent finished runs."""

from __future__ import annotations

import contextlib
import os
import statistics
from collections import Counter

from impyard.common.errors import ImpyardError
from impyard.home import Home
from impyard.policy.compile import deployed_policy
from impyard.runs.ready.claim import wants
from impyard.runs.ready.pool import ready_boxes
from impyard.runs.records import manifest as manifests
from impyard.status.model import WarmPool, WarmSection

#: How many of the most recent runs the hit and miss counts cover: reading every manifest
#: of a month-old data root would make status slow.
RECENT_RUNS = 200


def warm_section(home: Home) -> WarmSection:
    section = WarmSection(pools=_pools(home))
    claims: list[float] = []
    for run_id in _recent_run_ids(home):
        m = manifests.read_or_none(home, run_id)
        if m is None or not m.is_terminal:
            continue
        section.recent_runs += 1
        if m.warm:
            section.hits += 1
            if "claim" in m.timings_ms:
                claims.append(m.timings_ms["claim"])
        elif m.warm_pool is not None:
            section.misses += 1
    if claims:
        section.claim_ms_p50 = round(statistics.median(claims), 1)
        section.claim_ms_p95 = round(_percentile(claims, 0.95), 1)
    return section


def _pools(home: Home) -> list[WarmPool]:
    ready = Counter(box.key for box in ready_boxes(home))
    pools: dict[str, WarmPool] = {}
    for imp, shape in wants(home).items():
        wanted = 0
        with contextlib.suppress(ImpyardError):  # an imp gone since: it wants none
            wanted = deployed_policy(home, imp).box.warm.boxes
        pool = pools.setdefault(
            shape.key,
            WarmPool(
                key=shape.key,
                image=shape.image,
                runtime=shape.runtime,
                ready=ready.pop(shape.key, 0),
                wanted=0,
            ),
        )
        pool.wanted = max(pool.wanted, wanted)
    for key, n in ready.items():  # boxes of a shape no imp wants now (serve drains them)
        pools[key] = WarmPool(key=key, image="?", runtime="?", ready=n, wanted=0)
    return sorted(pools.values(), key=lambda p: p.key)


def _recent_run_ids(home: Home) -> list[str]:
    """The newest run ids (they sort by time), newest last."""
    try:
        names = sorted(e.name for e in os.scandir(home.runs_dir) if e.name.startswith("run-"))
    except FileNotFoundError:
        return []
    return names[-RECENT_RUNS:]


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]
