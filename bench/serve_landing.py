"""serve_bench's measures and checks read back from what Impyard recorded: when each
run's checkpoint landed (the journal), its lane time (its manifest), and whether every
queued task landed exactly once on its own imp."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import pygit2

from bench.common import percentile
from impyard.common.names import utc_epoch
from impyard.home import Home
from impyard.journal.log import Journal
from impyard.queue import tasks
from impyard.queue.db import opened
from impyard.runs.records import manifest as manifests

#: The words before a task's marker in its prompt (and so in its note).
FACT = "bench fact"


@dataclass
class Side:
    """One side's measurement at one concurrency, summed over its halves."""

    seconds: float = 0.0
    latencies_ms: list[float] = field(default_factory=list)
    lanes_ms: list[float] = field(default_factory=list)
    #: CPU time serve's process spent while its halves drained (where measured).
    cpu_seconds: float = 0.0

    def add(
        self,
        seconds: float,
        latencies_ms: Sequence[float],
        lanes_ms: Sequence[float] = (),
        cpu_seconds: float = 0.0,
    ) -> None:
        self.seconds += seconds
        self.latencies_ms.extend(latencies_ms)
        self.lanes_ms.extend(lanes_ms)
        self.cpu_seconds += cpu_seconds

    @property
    def rate(self) -> float:
        return len(self.latencies_ms) / self.seconds

    def p(self, fraction: float) -> str:
        return f"{percentile(self.latencies_ms, fraction):.0f}"


@dataclass(frozen=True)
class Queued:
    """A task the bench added: its imp and the marker its note must carry."""

    imp: str
    marker: str


def integrated_at(home: Path) -> dict[str, float]:
    """When each run's exit checkpoint landed (epoch seconds), from the journal."""
    found: dict[str, float] = {}
    for entry in Journal(Home(home).journal).read(event="knowledge.integrated"):
        stamp = utc_epoch(str(entry.get("ts")))
        if stamp is not None:
            found.setdefault(str(entry.get("run")), stamp)
    return found


def bench_notes(repo: pygit2.Repository, tree: pygit2.Tree) -> Iterator[str]:
    """The text of every note under ``records/bench`` of ``tree``."""
    try:
        notes = cast(pygit2.Tree, cast(pygit2.Tree, tree / "records") / "bench")
    except KeyError:
        return
    for entry in notes:
        yield cast(pygit2.Blob, repo[entry.id]).data.decode()


def landing_problems(home: Path, queued: dict[str, Queued]) -> list[str]:
    """Whatever shows that a task did not land exactly once, on its own imp."""
    problems: list[str] = []
    with opened(Home(home).db) as conn:
        by_id = {t.id: t for t in tasks.list_tasks(conn)}
    runs: dict[str, str] = {}
    for task_id in queued:
        task = by_id.get(task_id)
        if task is None or task.state != "done" or task.checkpoint != "integrated":
            state = "missing" if task is None else f"{task.state}/{task.checkpoint}/{task.error}"
            problems.append(f"task {task_id}: {state}")
        elif task.run_id:
            runs[task.run_id] = task_id
    journaled = Counter(
        str(e.get("run")) for e in Journal(Home(home).journal).read(event="knowledge.integrated")
    )
    problems += [
        f"run {r} journaled integrated {journaled[r]} times" for r in runs if journaled[r] != 1
    ]
    trailers: Counter[tuple[str, str]] = Counter()
    markers: Counter[tuple[str, str]] = Counter()
    for imp in sorted({q.imp for q in queued.values()}):
        repo = pygit2.Repository(str(Home(home).repo(imp)))
        head = repo.references["refs/heads/main"].peel(pygit2.Commit)
        for commit in repo.walk(head.id, pygit2.enums.SortMode.TOPOLOGICAL):
            for line in commit.message.splitlines():
                if line.startswith("Impyard-Task: "):
                    trailers[(line.removeprefix("Impyard-Task: "), imp)] += 1
        for text in bench_notes(repo, head.tree):
            for line in text.splitlines():
                if line.startswith(f"{FACT} ["):
                    markers[(line.split()[2], imp)] += 1
    for task_id, q in queued.items():
        if trailers[(task_id, q.imp)] != 1:
            problems.append(f"task {task_id}: {trailers[(task_id, q.imp)]} commits on {q.imp}")
        if markers[(q.marker, q.imp)] != 1:
            problems.append(f"task {task_id}: {markers[(q.marker, q.imp)]} notes on {q.imp}")
    elsewhere = [k for k in trailers if k[0] in queued and k[1] != queued[k[0]].imp]
    problems += [f"task {t}: landed on {imp}" for t, imp in elsewhere]
    return problems


def measured(home: Path, finished: list[tasks.Task]) -> tuple[float, list[float], list[float]]:
    """A batch's window (first ``created_at`` to last integration, seconds), each task's
    latency over it and each run's lane time (its ``checkpoint`` phase), in ms."""
    landed = integrated_at(home)
    starts, ends, latencies, lanes = [], [], [], []
    for task in finished:
        created = utc_epoch(task.created_at)
        end = landed.get(task.run_id or "")
        if task.checkpoint != "integrated" or created is None or end is None:
            continue  # reported by the landing check
        starts.append(created)
        ends.append(end)
        latencies.append((end - created) * 1000)
        run = manifests.read_or_none(Home(home), task.run_id or "")
        if run is not None and "checkpoint" in run.timings_ms:
            lanes.append(run.timings_ms["checkpoint"])
    if not latencies:
        raise SystemExit(f"no task of the batch integrated; see {home}/serve-*.log")
    return max(ends) - min(starts), latencies, lanes
