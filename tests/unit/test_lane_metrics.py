"""Each lane pass leaves one ``lane.pass`` journal event (its size, each change's outcome
and seconds in the lane), and ``/metrics`` turns them into histograms by imp."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pygit2
import pytest
from prometheus_client.parser import text_string_to_metric_families

from impyard.common.errors import KnowledgeError
from impyard.common.fsutil import locked
from impyard.home import Home
from impyard.journal.log import Journal
from impyard.knowledge.integration import lane as lane_module
from impyard.knowledge.integration.lane import integrate
from impyard.knowledge.integration.lanequeue import waiting
from impyard.web.pages.tallies import MAX_SERIES, OTHER, LaneTally
from tests.helpers.repo import change_of, make_imp, note_text, run_id, trailers
from tests.helpers.web import console_for
from tests.unit.test_lane_group import Job, Outcome, one_note_jobs, results, wait_for

#: How long the lane stays held once every change of a test's pass has queued: each
#: change's recorded seconds are at least this.
HOLD = 0.3


def land_held(home: Home, jobs: list[Job]) -> tuple[list[Outcome], float]:
    """Integrate ``jobs`` from a thread each, all queued behind the held lane lock, which
    is let go ``HOLD`` seconds after the last queued: one pass takes them all. Returns
    their outcomes and the wall time from the first thread's start to the last's end."""
    key = home.lane_lock("yuko")
    outcomes: list[Outcome | None] = [None] * len(jobs)

    def work(i: int) -> None:
        try:
            outcomes[i] = jobs[i].integrate(home)
        except Exception as exc:
            outcomes[i] = exc

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(jobs))]
    started = time.monotonic()
    with locked(key):
        for n, thread in enumerate(threads, 1):
            thread.start()
            wait_for(lambda n=n: waiting(key) == n)
        time.sleep(HOLD)
    for thread in threads:
        thread.join(timeout=60)
        assert not thread.is_alive()
    elapsed = time.monotonic() - started
    return [o for o in outcomes if o is not None], elapsed


def passes(home: Home) -> list[dict[str, object]]:
    return Journal(home.journal).read(event="lane.pass")


def test_a_pass_records_its_size_outcomes_and_each_changes_seconds(tmp_path: Path) -> None:
    home, repo = make_imp(tmp_path)
    jobs = one_note_jobs(repo, 5)
    # The third writes the second's path: the pass sets it aside as a conflict.
    path = next(iter(jobs[1].change.written))
    other = change_of(repo, {path: note_text(f"{jobs[1].ns}_1", body="other\n").encode()})
    jobs[2] = Job(other, jobs[1].base, jobs[1].ns, run_id(33))

    outcomes, elapsed = land_held(home, jobs)

    checkpoints = [r.checkpoint for r in results(outcomes)]
    assert sorted(checkpoints) == [
        "conflict",
        "integrated",
        "integrated",
        "integrated",
        "integrated",
    ]
    [event] = passes(home)
    assert event["imp"] == "yuko" and event["size"] == 5
    assert event["outcomes"] == {"integrated": 4, "conflict": 1}
    seconds = event["seconds"]
    assert isinstance(seconds, list) and len(seconds) == 5
    assert all(HOLD <= s <= elapsed for s in seconds), (seconds, elapsed)

    # A change alone is a pass of one, and its seconds exclude its validation.
    [lone] = one_note_jobs(repo, 1, first=9)
    started = time.monotonic()
    assert lone.integrate(home).checkpoint == "integrated"
    took = time.monotonic() - started
    last = passes(home)[-1]
    assert last["size"] == 1 and last["outcomes"] == {"integrated": 1}
    assert isinstance(last["seconds"], list) and 0 < last["seconds"][0] <= took


def test_a_pass_whose_main_did_not_move_records_no_integration(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home, repo = make_imp(tmp_path)
    jobs = one_note_jobs(repo, 3)

    def moved_outside(repo: pygit2.Repository, old: str, new: pygit2.Oid) -> None:
        raise KnowledgeError("main moved outside the lane")

    monkeypatch.setattr(lane_module, "_compare_and_swap_main", moved_outside)
    outcomes, _ = land_held(home, jobs)

    assert all(isinstance(o, KnowledgeError) for o in outcomes)
    [event] = passes(home)
    assert event["size"] == 3 and event["outcomes"] == {"error": 3}


def test_a_dry_run_takes_no_pass(tmp_path: Path) -> None:
    home, repo = make_imp(tmp_path)
    [job] = one_note_jobs(repo, 1)
    dry = integrate(
        home,
        "yuko",
        job.change,
        base=job.base,
        namespace=job.ns,
        mode=job.mode,
        limits=job.limits,
        trailers=trailers(job.base, run=job.run),
        dry_run=True,
    )
    assert dry.checkpoint == "integrated" and dry.commit is None
    assert passes(home) == []


def lane_samples(text: str) -> dict[tuple[str, str, str], float]:
    """The lane histograms' samples: (sample name, imp, le) -> value."""
    found: dict[tuple[str, str, str], float] = {}
    for family in text_string_to_metric_families(text):
        if family.name in ("impyard_lane_integration_seconds", "impyard_lane_batch_size"):
            assert family.type == "histogram"
            for sample in family.samples:
                key = (sample.name, sample.labels["imp"], sample.labels.get("le", ""))
                found[key] = sample.value
    return found


def test_metrics_show_lane_histograms_moving_as_checkpoints_land(tmp_path: Path) -> None:
    home, repo = make_imp(tmp_path)
    _, client = console_for(home.root, metrics_public=True)
    assert lane_samples(client.get("/metrics").text) == {}

    outcomes, elapsed = land_held(home, one_note_jobs(repo, 3))
    assert len(list(results(outcomes))) == 3
    first = lane_samples(client.get("/metrics").text)
    assert first[("impyard_lane_batch_size_count", "yuko", "")] == 1
    assert first[("impyard_lane_batch_size_sum", "yuko", "")] == 3
    assert first[("impyard_lane_batch_size_bucket", "yuko", "2.0")] == 0
    assert first[("impyard_lane_batch_size_bucket", "yuko", "4.0")] == 1
    assert first[("impyard_lane_integration_seconds_count", "yuko", "")] == 3
    total = first[("impyard_lane_integration_seconds_sum", "yuko", "")]
    assert 3 * HOLD <= total <= 3 * elapsed
    # Every change waited at least HOLD: none in the buckets below it.
    assert first[("impyard_lane_integration_seconds_bucket", "yuko", "0.25")] == 0
    assert first[("impyard_lane_integration_seconds_bucket", "yuko", "+Inf")] == 3

    outcomes, _ = land_held(home, one_note_jobs(repo, 2, first=4))
    assert len(list(results(outcomes))) == 2
    second = lane_samples(client.get("/metrics").text)
    assert second[("impyard_lane_batch_size_count", "yuko", "")] == 2
    assert second[("impyard_lane_batch_size_sum", "yuko", "")] == 5
    assert second[("impyard_lane_batch_size_bucket", "yuko", "2.0")] == 1
    assert second[("impyard_lane_integration_seconds_count", "yuko", "")] == 5

    # A console started afterwards (another process, as `impyard web` is) reads the same.
    _, fresh = console_for(home.root, metrics_public=True)
    assert lane_samples(fresh.get("/metrics").text) == second


def test_lane_tally_skips_malformed_events_and_bounds_imps() -> None:
    tally = LaneTally()
    tally.add({"imp": "yuko", "size": True, "seconds": [-1, "2", None, False, 0.5]})
    tally.add({"imp": "yuko", "size": "3", "seconds": "0.5"})
    assert tally.batch.counts == {}
    assert dict(tally.seconds.sums) == {"yuko": 0.5}
    for n in range(MAX_SERIES + 5):
        tally.add({"imp": f"imp{n}", "size": 1, "seconds": [0.01]})
    assert len(tally.batch.counts) == MAX_SERIES
    assert tally.batch.buckets(OTHER)[-1] == ("+Inf", 6.0)
