"""``/metrics``: the data root in Prometheus text format, with prometheus_client.

Computed at scrape time from what the console already keeps: runs from the run index
(each finished manifest read once, ever), the queue and disk as ``impyard status``
reads them, backup lag from the backup status file, and gateway requests and lane
passes from the journal's ``gateway.request`` and ``lane.pass`` events, read
incrementally (``tallies``: the journal is read whole on the first scrape, then only
what was appended since the one before).

Labels are bounded: imps are the data root's imps, outcomes and phases closed sets, and
routes and rules what policy and code name (an allow rule by its index, a backup remote
by its place in the policy's list); no run id, URL, host or path is a label.
A label value read from the journal past ``tallies.MAX_SERIES`` distinct ones counts as
``other``.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from impyard.backup.remotes import label
from impyard.home import Home
from impyard.knowledge.imps import list_imps
from impyard.policy.compile import deployed_org_policy
from impyard.runs.ready.pool import ready_boxes
from impyard.status.backup import backup_section
from impyard.status.cluster import cluster_section
from impyard.status.knowledge import imp_knowledge
from impyard.status.units import age_seconds
from impyard.status.work import queue_and_leases
from impyard.web.access.console import Console
from impyard.web.pages.runindex import RunFacts
from impyard.web.pages.tallies import OTHER, GatewayTally, Histograms, JournalTallies, LaneTally

OUTCOMES = ("integrated", "empty", "rejected", "conflict", "quarantined")
PHASES = ("prepare", "claim", "start", "gateway", "box", "checkpoint", "quarantine")
DURATION_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)
PHASE_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 15.0, 60.0, 300.0, 1800.0)


class ConsoleCollector(Collector):
    def __init__(self, console: Console) -> None:
        self.console = console
        self.journal = JournalTallies(console.home)

    def collect(self) -> Iterator[Metric]:
        home = self.console.home
        imps = set(list_imps(home))
        view = self.console.index.refresh()
        finished = [f for f in view.facts.values() if f.finished]
        yield from _runs(finished, imps)
        unfinished = GaugeMetricFamily(
            "impyard_runs_unfinished", "Runs not finished, by state.", labels=["state"]
        )
        for state, n in sorted(Counter(f.state for f in view.unfinished()).items()):
            unfinished.add_metric([state], n)
        yield unfinished
        yield from _queue(self.console)
        yield from _warm(home, finished)
        yield from _disk(home)
        yield from _backup(home, sorted(imps))
        yield from _cluster(home)
        self.journal.update()
        yield from _gateway(self.journal.gateway)
        yield from _lane(self.journal.lane)


def _runs(finished: list[RunFacts], imps: set[str]) -> Iterator[Metric]:
    runs = CounterMetricFamily(
        "impyard_runs", "Finished runs, by imp and outcome.", labels=["imp", "outcome"]
    )
    counts = Counter(
        (f.imp if f.imp in imps else OTHER, f.checkpoint if f.checkpoint in OUTCOMES else OTHER)
        for f in finished
    )
    for (imp, outcome), n in sorted(counts.items()):
        runs.add_metric([imp, outcome], n)
    yield runs
    yield _histogram(
        "impyard_run_duration_seconds",
        "Wall-clock time of finished runs, from the box's start to the run's end.",
        [f.duration_seconds for f in finished if f.duration_seconds is not None],
        DURATION_BUCKETS,
    )
    phases = HistogramMetricFamily(
        "impyard_run_phase_seconds", "Time finished runs spent in each phase.", labels=["phase"]
    )
    for phase in PHASES:
        values = [f.phases[phase] for f in finished if phase in f.phases]
        buckets, total = _buckets(values, PHASE_BUCKETS)
        phases.add_metric([phase], buckets, total)
    yield phases


def _histogram(
    name: str, help_text: str, values: list[float], bounds: tuple[float, ...]
) -> HistogramMetricFamily:
    buckets, total = _buckets(values, bounds)
    return HistogramMetricFamily(name, help_text, buckets=buckets, sum_value=total)


def _buckets(
    values: list[float], bounds: tuple[float, ...]
) -> tuple[list[tuple[str, float]], float]:
    cumulative = [(str(b), float(sum(1 for v in values if v <= b))) for b in bounds]
    return [*cumulative, ("+Inf", float(len(values)))], float(sum(values))


def _warm(home: Home, finished: list[RunFacts]) -> Iterator[Metric]:
    """Ready boxes now, and finished runs by whether they had one (a claim's latency is
    the ``claim`` phase)."""
    ready = GaugeMetricFamily(
        "impyard_warm_ready_boxes", "Ready boxes waiting for a run, by pool.", labels=["pool"]
    )
    for pool, n in sorted(Counter(box.key for box in ready_boxes(home)).items()):
        ready.add_metric([pool], n)
    yield ready
    claims = CounterMetricFamily(
        "impyard_warm_claims",
        "Finished runs that looked for a ready box, by whether one was there.",
        labels=["result"],
    )
    looked = Counter("hit" if f.warm else "miss" for f in finished if f.looked_warm)
    for result in ("hit", "miss"):
        claims.add_metric([result], looked[result])
    yield claims


def _queue(console: Console) -> Iterator[Metric]:
    queue, _ = queue_and_leases(console.home, console.settings.lease_ttl_seconds, datetime.now(UTC))
    tasks = GaugeMetricFamily("impyard_queue_tasks", "Queued tasks, by state.", labels=["state"])
    for state, n in sorted(queue.counts.items()):
        tasks.add_metric([state], n)
    yield tasks


def _disk(home: Home) -> Iterator[Metric]:
    try:
        fs = os.statvfs(home.root)
    except OSError:
        return
    yield GaugeMetricFamily(
        "impyard_data_root_free_bytes",
        "Bytes free for the data root (as run admission counts them).",
        value=fs.f_bavail * fs.f_frsize,
    )


def _cluster(home: Home) -> Iterator[Metric]:
    section = cluster_section(home)
    if not section.enabled:
        return
    nodes = GaugeMetricFamily("impyard_cluster_nodes", "Cluster nodes, by state.", labels=["state"])
    for state in ("ready", "drained", "down"):
        nodes.add_metric([state], sum(n.state == state for n in section.nodes))
    yield nodes
    # Totals only: a node's name is a machine's, and no label names a host.
    yield GaugeMetricFamily(
        "impyard_cluster_boxes",
        "Boxes running on the cluster's nodes.",
        value=sum(n.boxes for n in section.nodes),
    )
    yield GaugeMetricFamily(
        "impyard_cluster_capacity",
        "Runs the cluster's ready nodes take at once.",
        value=sum(n.capacity for n in section.nodes if n.state == "ready"),
    )


def _backup(home: Home, imps: list[str]) -> Iterator[Metric]:
    knowledge = [imp_knowledge(home, imp) for imp in imps]
    remotes = list(dict.fromkeys(deployed_org_policy(home).backup.remotes))
    # A remote is a URL or a path: the label is its place in the policy's list.
    names = {label(base): f"backup.remotes[{i}]" for i, base in enumerate(remotes)}
    section = backup_section(home, len(remotes), knowledge)
    behind = GaugeMetricFamily(
        "impyard_backup_behind_commits",
        "Commits on main not yet pushed to a backup remote.",
        labels=["imp", "remote"],
    )
    since = GaugeMetricFamily(
        "impyard_backup_last_push_age_seconds",
        "Seconds since main was last pushed to a backup remote.",
        labels=["imp", "remote"],
    )
    now = datetime.now(UTC)
    for imp in section.imps:
        for remote in imp.remotes:
            name = names.get(remote.remote, OTHER)
            if remote.behind is not None:
                behind.add_metric([imp.imp, name], remote.behind)
            age = age_seconds(remote.pushed_at, now)
            if age is not None:
                since.add_metric([imp.imp, name], age)
    yield behind
    yield since


def _gateway(tally: GatewayTally) -> Iterator[Metric]:
    requests = CounterMetricFamily(
        "impyard_gateway_requests",
        "Requests boxes made through the gateway, by route, rule and decision.",
        labels=["route", "rule", "decision"],
    )
    for (route, rule, decision), n in sorted(tally.requests.items()):
        requests.add_metric([route, rule, decision], n)
    yield requests
    for name, help_text, counts in (
        ("impyard_gateway_request_bytes", "Request body bytes, by route.", tally.request_bytes),
        (
            "impyard_gateway_response_bytes",
            "Response bytes relayed, by route.",
            tally.response_bytes,
        ),
    ):
        family = CounterMetricFamily(name, help_text, labels=["route"])
        for route, n in sorted(counts.items()):
            family.add_metric([route], n)
        yield family
    refusals = CounterMetricFamily(
        "impyard_gateway_budget_refusals", "Requests refused by a budget, by rule.", labels=["rule"]
    )
    for rule, n in sorted(tally.refusals.items()):
        refusals.add_metric([rule], n)
    yield refusals


def _lane(tally: LaneTally) -> Iterator[Metric]:
    yield _by_imp(
        "impyard_lane_integration_seconds",
        "Seconds each change spent in its imp's lane, from entering it (validated) to the "
        "pass settling it (main moved, or it was refused).",
        tally.seconds,
    )
    yield _by_imp(
        "impyard_lane_batch_size", "Changes each pass of an imp's lane took.", tally.batch
    )


def _by_imp(name: str, help_text: str, histograms: Histograms) -> HistogramMetricFamily:
    family = HistogramMetricFamily(name, help_text, labels=["imp"])
    for imp in sorted(histograms.counts):
        family.add_metric([imp], histograms.buckets(imp), histograms.sums[imp])
    return family


def metrics_route(console: Console) -> Route:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ConsoleCollector(console))

    async def metrics(request: Request) -> Response:
        body = await run_in_threadpool(generate_latest, registry)
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    return Route("/metrics", metrics)
