"""Property: any set of valid append candidates, from any bases, concurrently, all land."""

from __future__ import annotations

import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from impyard.knowledge.change import Change
from impyard.knowledge.imps import open_repo
from impyard.knowledge.integration.lane import LaneResult
from impyard.knowledge.store.repo import main_commit
from tests.helpers import repo as knowledge
from tests.helpers.git import git
from tests.helpers.repo import namespace, run_id

# Each candidate: (how many notes, which earlier landing to take as base, which topic)
candidate = st.tuples(
    st.integers(min_value=1, max_value=3),
    st.integers(min_value=0, max_value=5),
    st.sampled_from(["vendors", "papers", "people"]),
)


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    waves=st.lists(st.lists(candidate, min_size=1, max_size=4), min_size=1, max_size=3),
)
def test_concurrent_append_candidates_all_land(waves: list[list[tuple[int, int, str]]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        home, repo = knowledge.make_imp(Path(tmp))
        landed = [main_commit(repo)]
        expected: set[str] = set()
        serial = 0
        for wave in waves:
            jobs = []
            for notes, base_pick, topic in wave:
                serial += 1
                ns = namespace(serial)
                files = {
                    knowledge.note_path(ns, n, topic=topic, slug=f"s{n}"): knowledge.note_text(
                        f"{ns}_{n}"
                    ).encode()
                    for n in range(1, notes + 1)
                }
                expected |= set(files)
                base = landed[base_pick % len(landed)]
                jobs.append((knowledge.change_of(repo, files), base, ns, run_id(serial)))

            def work(job: tuple[Change, str, str, str]) -> LaneResult:
                change, base, ns, run = job
                return knowledge.integrate_change(home, change, base, ns=ns, run=run)

            # All of a wave's candidates race for the lane at once.
            with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
                results = list(pool.map(work, jobs))
            assert [r.checkpoint for r in results] == ["integrated"] * len(jobs), results
            landed.extend(r.commit or "" for r in results)

        final = open_repo(home, "yuko")
        assert expected <= knowledge.tree_paths(final)
        history = git("-C", home.repo("yuko"), "rev-list", "--parents", "main").stdout.splitlines()
        assert len(history) == serial + 1
        for line in history[:-1]:
            assert len(line.split()) == 2  # exactly one parent: a chain
        assert len(history[-1].split()) == 1  # the root
        assert set(landed) == {line.split()[0] for line in history}
        knowledge.assert_fsck_clean(home.repo("yuko"))
        assert git("-C", home.origin("yuko"), "rev-parse", "main").stdout.strip() == main_commit(
            final
        )
