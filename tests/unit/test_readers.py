"""Validations of one base share a repository, and an imp validates two changes at most
at once; validating through the shared repository gives what a fresh one gives."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pygit2

from impyard.home import Home
from impyard.knowledge.integration import readers
from impyard.knowledge.integration.lane import LaneResult
from impyard.knowledge.integration.readers import validation_reader
from impyard.knowledge.store.repo import main_commit
from tests.helpers.repo import (
    change_of,
    integrate_change,
    make_imp,
    namespace,
    note,
    run_id,
)


def land_note(home: Home, repo: pygit2.Repository, base: str, n: int, ns: str) -> LaneResult:
    """Integrate run ``n``, appending note ``n`` of namespace ``ns`` (as namespace 1)."""
    path, data = note(ns, number=n)
    return integrate_change(
        home, change_of(repo, {path: data}), base, ns=namespace(1), run=run_id(n)
    )


def test_validations_of_one_base_share_a_repository_and_a_new_base_gets_its_own(
    tmp_path: Path,
) -> None:
    home, repo = make_imp(tmp_path)
    base = main_commit(repo)
    with (
        validation_reader(home, "yuko", base) as first,
        validation_reader(home, "yuko", base) as again,
    ):
        assert again is first
    landed = land_note(home, repo, base, 1, namespace(1))
    assert landed.checkpoint == "integrated"
    with validation_reader(home, "yuko", str(landed.commit)) as newer:
        assert newer is not first
        # The shared repository sees what the lane wrote after it was opened.
        assert str(newer[str(landed.commit)].id) == landed.commit


def test_an_imp_validates_at_most_two_changes_at_once(tmp_path: Path) -> None:
    home, repo = make_imp(tmp_path)
    base = main_commit(repo)
    inside, most = 0, 0
    lock = threading.Lock()

    def validate() -> None:
        nonlocal inside, most
        with validation_reader(home, "yuko", base):
            with lock:
                inside += 1
                most = max(most, inside)
            time.sleep(0.05)
            with lock:
                inside -= 1

    threads = [threading.Thread(target=validate) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert most == readers.MAX_VALIDATING == 2


def test_runs_of_one_base_landing_together_are_each_judged_on_their_own(tmp_path: Path) -> None:
    home, repo = make_imp(tmp_path)
    base = main_commit(repo)
    results = {}

    def land(n: int, ns: str) -> None:
        results[n] = land_note(home, repo, base, n, ns)

    # Run 3 claims another namespace: refused, while the others land beside it.
    threads = [
        threading.Thread(target=land, args=(n, namespace(3 if n == 3 else 1))) for n in range(1, 6)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert {n: r.checkpoint for n, r in results.items()} == {
        1: "integrated",
        2: "integrated",
        3: "rejected",
        4: "integrated",
        5: "integrated",
    }
    assert [v.rule for v in results[3].violations] == ["namespace"]
