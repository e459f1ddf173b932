"""The first run of a cold big imp: ``lane_bench``'s side from ``impyard run`` to a running box.

A fresh data root (``init``, ``deploy``, ``imp create``) whose imp gets ``records`` notes
straight into its repository (``common.add_records``) and a published origin, so nothing
has prepared a checkout of its main yet. Another imp of the data root has run once
first: a data root's first run also asks the engine whether overlay volumes work (a box
of its own), which has nothing to do with the imp being cold. ``packed``: the records'
blobs in one pack, as the lane's folds and a restore leave a repository; else each a
loose object, as in an imp from before folds (every object read costs more). ``topics``:
the directories the records are spread over. Then
``impyard run`` of a one-note box, timed from just before the command starts to the
``box.started`` event the journal records for it, beside the run's own ``prepare``
phase (``timings_ms``); then a second run of the same imp (its base now prepared) the
same way.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from bench.common import add_records, impyard, remove_data_root, scratch_dir
from impyard.home import Home
from impyard.knowledge.integration.origin import publish_origin

NOTE = 'printf "a fact\\n" | impyard-note bench one-note --source https://example.com'


@dataclass(frozen=True)
class FirstRun:
    #: Seconds from ``impyard run`` starting to its box started, for the first run and the next.
    first_s: float
    next_s: float
    #: The first run's ``prepare`` phase (ms) and whole run (ms).
    prepare_ms: float
    total_ms: float
    setup_s: float


def _box_started(home: Path, run: str) -> float:
    for line in (home / "journal.jsonl").read_text().splitlines():
        event = json.loads(line)
        if event.get("event") == "box.started" and event.get("run") == run:
            return datetime.fromisoformat(event["ts"].replace("Z", "+00:00")).timestamp()
    raise SystemExit(f"no box.started event for {run} in {home / 'journal.jsonl'}")


def _timed_run(home: Path, imp: str = "bench") -> tuple[float, dict[str, float]]:
    start = time.time()
    result = impyard(home, "run", imp, "--prompt", "bench", "--command", NOTE, check=False)
    if result.returncode != 0:
        raise SystemExit(
            f"impyard run failed ({result.returncode}): {result.stdout}{result.stderr}"
        )
    shown = json.loads(impyard(home, "runs", "show", "last", "--json").stdout)
    if shown["checkpoint"] != "integrated":
        raise SystemExit(f"the run did not land: {shown['checkpoint']} {shown['reason']}")
    return _box_started(home, shown["run_id"]) - start, shown["timings_ms"]


def first_run(records: int, *, packed: bool = False, topics: int = 100) -> FirstRun:
    home = scratch_dir("impyard-firstrun-")
    try:
        setup = time.perf_counter()
        impyard(home, "init")
        impyard(home, "deploy")
        impyard(home, "imp", "create", "bench")
        impyard(home, "imp", "create", "other")
        _timed_run(home, "other")
        add_records(Home(home).repo("bench"), records, topics, packed=packed)
        publish_origin(Home(home), "bench")
        setup_s = time.perf_counter() - setup
        first_s, timings = _timed_run(home)
        next_s, _ = _timed_run(home)
    finally:
        remove_data_root(home)
    return FirstRun(first_s, next_s, timings["prepare"], timings["total"], setup_s)
