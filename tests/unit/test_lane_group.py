"""Group commit: runs of one imp that wait for the lane together land in one pass, each as
its own commit, with one durable write, one compare-and-swap and one origin refresh."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pygit2
import pytest

from impyard.common.errors import KnowledgeError
from impyard.common.fsutil import locked
from impyard.home import Home
from impyard.knowledge.change import Change, KnowledgeLimits, Mode
from impyard.knowledge.imps import open_repo
from impyard.knowledge.integration import lane as lane_module
from impyard.knowledge.integration.lane import LaneResult, find_landed_commit
from impyard.knowledge.integration.lanequeue import waiting
from impyard.knowledge.integration.origin import publish_origin
from impyard.knowledge.store.repo import main_commit
from impyard.knowledge.store.staging import MemoryObjects
from impyard.knowledge.validation.sizes import tree_bytes, tree_bytes_full
from tests.helpers import repo as knowledge
from tests.helpers.git import git
from tests.helpers.repo import namespace, run_id

LIMITS = KnowledgeLimits()


class HostDied(BaseException):
    """The host going down mid-pass: not an error anything may catch and carry on from."""


@dataclass(frozen=True)
class Job:
    change: Change
    base: str
    ns: str
    run: str
    limits: KnowledgeLimits = LIMITS
    mode: Mode = "append"

    def integrate(self, home: Home) -> LaneResult:
        return knowledge.integrate_change(
            home,
            self.change,
            self.base,
            ns=self.ns,
            run=self.run,
            mode=self.mode,
            limits=self.limits,
        )


Outcome = LaneResult | BaseException


def one_note_jobs(repo: pygit2.Repository, count: int, first: int = 1) -> list[Job]:
    base = main_commit(repo)
    jobs = []
    for i in range(first, first + count):
        change = knowledge.change_of(repo, dict([knowledge.note(namespace(i), 1, slug=f"s{i}")]))
        jobs.append(Job(change, base, namespace(i), run_id(i)))
    return jobs


def wait_for(condition: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.002)


def land_together(home: Home, jobs: list[Job]) -> list[Outcome]:
    """Integrate ``jobs`` from one thread each, queued in this order behind a held lane
    lock, so that one pass takes all that need the lane."""
    key = home.lane_lock("yuko")
    outcomes: list[Outcome | None] = [None] * len(jobs)

    def work(i: int) -> None:
        try:
            outcomes[i] = jobs[i].integrate(home)
        except BaseException as exc:  # HostDied included: the test looks at it
            outcomes[i] = exc

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(jobs))]
    queued = 0
    with locked(home.lane_lock("yuko")):
        for thread in threads:
            thread.start()
            # A run found on main already returns without waiting for the lane.
            wait_for(lambda t=thread, n=queued: waiting(key) == n + 1 or not t.is_alive())
            if thread.is_alive():
                queued += 1
    for thread in threads:
        thread.join(timeout=60)
        assert not thread.is_alive()
    assert all(o is not None for o in outcomes)
    return [o for o in outcomes if o is not None]


@pytest.fixture
def swaps(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every compare-and-swap of main the lane makes (new targets, in order)."""
    made: list[str] = []
    real = lane_module._compare_and_swap_main

    def counting(repo: pygit2.Repository, old: str, new: pygit2.Oid) -> None:
        real(repo, old, new)
        made.append(str(new))

    monkeypatch.setattr(lane_module, "_compare_and_swap_main", counting)
    return made


def first_parent_chain(home: Home) -> list[str]:
    """main's commits, oldest first; fails on a merge."""
    lines = git("-C", home.repo("yuko"), "rev-list", "--reverse", "--parents", "main")
    shas = []
    for line in lines.stdout.splitlines():
        parts = line.split()
        assert len(parts) <= 2, f"merge commit on main: {line}"
        shas.append(parts[0])
    return shas


def landed_paths(repo: pygit2.Repository, sha: str) -> set[str]:
    commit = repo[sha].peel(pygit2.Commit)
    diff = repo.diff(commit.parents[0], commit)
    return {patch.delta.new_file.path for patch in diff}


def pack_count(git_dir: Path) -> int:
    return sum(1 for name in os.listdir(git_dir / "objects" / "pack") if name.endswith(".idx"))


def results(outcomes: list[Outcome]) -> Iterator[LaneResult]:
    for outcome in outcomes:
        assert isinstance(outcome, LaneResult), outcome
        yield outcome


def test_runs_waiting_together_land_in_one_pass_each_as_its_own_commit(
    tmp_path: Path, swaps: list[str]
) -> None:
    home, repo = knowledge.make_imp(tmp_path)
    base = main_commit(repo)
    jobs = one_note_jobs(repo, 8)
    packs_before = pack_count(home.repo("yuko"))

    landed = list(results(land_together(home, jobs)))

    assert [r.checkpoint for r in landed] == ["integrated"] * 8
    assert len(swaps) == 1  # one compare-and-swap for the whole chain
    chain = first_parent_chain(home)
    assert chain == [base, *(r.commit for r in landed)]  # in queue order, one on another
    assert swaps == [landed[-1].commit]
    fresh = open_repo(home, "yuko")
    for job, result in zip(jobs, landed, strict=True):
        assert result.commit is not None
        commit = fresh[result.commit].peel(pygit2.Commit)
        assert commit.message_trailers["Impyard-Run"] == job.run
        assert commit.message_trailers["Impyard-Base"] == base
        assert commit.message_trailers["Impyard-Checkpoint"] == "1 (exit)"
        assert landed_paths(fresh, result.commit) == set(job.change.written)
        assert find_landed_commit(fresh, job.run, base) == result.commit
    # One durable batch: the chain's trees and commits are one pack, not a file each.
    assert pack_count(home.repo("yuko")) == packs_before + 1
    assert git("-C", home.origin("yuko"), "rev-parse", "main").stdout.strip() == chain[-1]
    assert tree_bytes(fresh, chain[-1]) == tree_bytes_full(
        fresh, fresh[chain[-1]].peel(pygit2.Tree)
    )
    knowledge.assert_fsck_clean(home.repo("yuko"))
    knowledge.assert_fsck_clean(home.origin("yuko"))


def test_many_threads_at_once_all_land_exactly_once(tmp_path: Path) -> None:
    home, repo = knowledge.make_imp(tmp_path)
    base = main_commit(repo)
    jobs = one_note_jobs(repo, 24)
    outcomes: list[Outcome | None] = [None] * len(jobs)
    start = threading.Barrier(len(jobs))

    def work(i: int) -> None:
        start.wait()
        outcomes[i] = jobs[i].integrate(home)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(jobs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    landed = list(results([o for o in outcomes if o is not None]))
    assert [r.checkpoint for r in landed] == ["integrated"] * len(jobs)
    chain = first_parent_chain(home)
    assert len(chain) == 1 + len(jobs) and chain[0] == base
    assert sorted(chain[1:]) == sorted(r.commit for r in landed if r.commit)
    runs = [open_repo(home, "yuko")[sha].peel(pygit2.Commit).message_trailers for sha in chain[1:]]
    assert sorted(t["Impyard-Run"] for t in runs) == sorted(j.run for j in jobs)
    assert {
        knowledge.note_path(j.ns, 1, slug=f"s{i}") for i, j in enumerate(jobs, 1)
    } <= knowledge.tree_paths(open_repo(home, "yuko"))
    knowledge.assert_fsck_clean(home.repo("yuko"))
    knowledge.assert_fsck_clean(home.origin("yuko"))


def test_a_conflicting_run_in_the_middle_is_set_aside_and_the_rest_land(
    tmp_path: Path, swaps: list[str]
) -> None:
    home, repo = knowledge.make_imp(tmp_path)
    jobs = one_note_jobs(repo, 5)
    # Run 3 writes the path run 2 writes (a host bug would be needed for the same
    # namespace; what matters is that the path collides within the group).
    clash = jobs[1]
    path = next(iter(clash.change.written))
    other = knowledge.change_of(
        repo, {path: knowledge.note_text(f"{clash.ns}_1", body="other\n").encode()}
    )
    jobs[2] = Job(other, clash.base, clash.ns, run_id(33))

    outcomes = list(results(land_together(home, jobs)))

    assert [r.checkpoint for r in outcomes] == [
        "integrated",
        "integrated",
        "conflict",
        "integrated",
        "integrated",
    ]
    refused = outcomes[2]
    assert [(v.path, v.rule) for v in refused.violations] == [(path, "collision")]
    assert refused.candidate_ref == f"refs/candidates/{run_id(33)}"
    assert refused.commit is None
    shown = git("-C", home.repo("yuko"), "show", f"{refused.candidate_ref}:{path}").stdout
    assert shown.endswith("other\n")
    assert len(swaps) == 1
    chain = first_parent_chain(home)
    assert chain[-4:] == [r.commit for r in outcomes if r.commit]
    fresh = open_repo(home, "yuko")
    assert fresh[chain[-3]].peel(pygit2.Commit).parents[0].id == pygit2.Oid(hex=chain[-4])
    assert git("-C", home.repo("yuko"), "show", f"main:{path}").stdout.endswith("Acme ships SSO.\n")
    knowledge.assert_fsck_clean(home.repo("yuko"))
    knowledge.assert_fsck_clean(home.origin("yuko"))


def test_ids_and_names_an_earlier_member_landed_are_rechecked_within_the_group(
    tmp_path: Path,
) -> None:
    home, repo = knowledge.make_imp(tmp_path)
    jobs = one_note_jobs(repo, 1)
    base, ns = jobs[0].base, jobs[0].ns
    # The id run 1 lands, under another topic (a reused namespace would be a host bug).
    twin = knowledge.note_path(ns, 1, topic="papers", slug="twin")
    jobs.append(
        Job(
            knowledge.change_of(repo, {twin: knowledge.note_text(f"{ns}_1").encode()}),
            base,
            ns,
            run_id(2),
        )
    )
    # Two reorganize runs adding names a case-folding file system would merge.
    for n, name in ((3, "Index.md"), (4, "index.md")):
        change = knowledge.change_of(repo, {f"organization/{name}": b"x\n"})
        jobs.append(Job(change, base, namespace(n), run_id(n), mode="reorganize"))

    outcomes = list(results(land_together(home, jobs)))

    assert [r.checkpoint for r in outcomes] == ["integrated", "conflict", "integrated", "conflict"]
    assert [(v.path, v.rule) for v in outcomes[1].violations] == [(twin, "duplicate-id")]
    assert ("organization/index.md", "name-clash") in {
        (v.path, v.rule) for v in outcomes[3].violations
    }
    knowledge.assert_fsck_clean(home.repo("yuko"))


def test_a_run_too_large_after_the_others_is_refused_and_leaves_nothing_behind(
    tmp_path: Path,
) -> None:
    home, repo = knowledge.make_imp(tmp_path)
    jobs = one_note_jobs(repo, 4)
    each = next(iter(jobs[0].change.written.values())).size
    # Room for three of the four notes: the fourth would outgrow the repository.
    limits = KnowledgeLimits(max_repo_bytes=tree_bytes(repo, jobs[0].base) + 3 * each)
    jobs = [replace(j, limits=limits) for j in jobs]
    jobs[1], jobs[3] = jobs[3], jobs[1]

    outcomes = list(results(land_together(home, jobs)))

    assert [r.checkpoint for r in outcomes] == ["integrated"] * 3 + ["rejected"]
    assert [(v.path, v.rule) for v in outcomes[3].violations] == [(".", "repo-too-large")]
    # The trees built for the refused run were never written: no object is unreachable
    # (its blob is the candidate's).
    fsck = git("-C", home.repo("yuko"), "fsck", "--strict", "--dangling")
    assert "dangling" not in fsck.stdout + fsck.stderr
    knowledge.assert_fsck_clean(home.origin("yuko"))


def test_a_run_failing_on_its_own_fails_alone(tmp_path: Path) -> None:
    home, repo = knowledge.make_imp(tmp_path)
    jobs = one_note_jobs(repo, 3)
    # A base that exists but is not on main: the recheck cannot say what landed since.
    sig = pygit2.Signature("x", "x@example.invalid")
    stray = str(repo.create_commit(None, sig, sig, "stray\n", repo[jobs[0].base].tree_id, []))
    stray_change = knowledge.change_of(repo, dict([knowledge.note(namespace(9), 1)]))
    jobs.insert(1, Job(stray_change, stray, namespace(9), run_id(9)))

    outcomes = land_together(home, jobs)

    assert isinstance(outcomes[1], KnowledgeError)
    assert "not an ancestor" in str(outcomes[1])
    others = list(results([o for i, o in enumerate(outcomes) if i != 1]))
    assert [r.checkpoint for r in others] == ["integrated"] * 3
    knowledge.assert_fsck_clean(home.repo("yuko"))


def test_the_same_run_twice_in_one_group_lands_once(tmp_path: Path) -> None:
    home, repo = knowledge.make_imp(tmp_path)
    jobs = one_note_jobs(repo, 3)
    jobs.insert(2, jobs[0])

    outcomes = list(results(land_together(home, jobs)))

    assert [r.checkpoint for r in outcomes] == ["integrated"] * 4
    assert outcomes[2].commit == outcomes[0].commit
    assert len(first_parent_chain(home)) == 1 + 3


def test_long_groups_are_published_in_bounded_chains(
    tmp_path: Path, swaps: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lane_module, "MAX_CHAIN_COMMITS", 2)
    home, repo = knowledge.make_imp(tmp_path)
    jobs = one_note_jobs(repo, 5)

    outcomes = list(results(land_together(home, jobs)))

    assert [r.checkpoint for r in outcomes] == ["integrated"] * 5
    assert swaps == [outcomes[1].commit, outcomes[3].commit, outcomes[4].commit]
    assert first_parent_chain(home)[-5:] == [r.commit for r in outcomes]
    knowledge.assert_fsck_clean(home.repo("yuko"))
    knowledge.assert_fsck_clean(home.origin("yuko"))


def test_reintegrating_landed_runs_returns_their_commits(tmp_path: Path) -> None:
    home, repo = knowledge.make_imp(tmp_path)
    jobs = one_note_jobs(repo, 4)
    first = list(results(land_together(home, jobs)))
    head = main_commit(open_repo(home, "yuko"))

    alone = jobs[2].integrate(home)
    again = list(results(land_together(home, jobs)))

    assert alone == LaneResult("integrated", commit=first[2].commit)
    assert again == first
    assert main_commit(open_repo(home, "yuko")) == head


def _die_in_staged_write(monkeypatch: pytest.MonkeyPatch) -> None:
    real = MemoryObjects.write

    def write_then_die(self: MemoryObjects, repo: pygit2.Repository) -> None:
        real(self, repo)  # objects durable, main not moved yet
        raise HostDied

    monkeypatch.setattr(MemoryObjects, "write", write_then_die)


def _die_at_swap(monkeypatch: pytest.MonkeyPatch) -> None:
    def die(*args: object) -> None:
        raise HostDied

    monkeypatch.setattr(lane_module, "_compare_and_swap_main", die)


def _die_after_swap(monkeypatch: pytest.MonkeyPatch) -> None:
    def die(*args: object) -> None:
        raise HostDied

    monkeypatch.setattr(lane_module, "record_tree_bytes", die)


@pytest.mark.parametrize(
    ("die", "moved"),
    [(_die_in_staged_write, False), (_die_at_swap, False), (_die_after_swap, True)],
    ids=["objects-written", "at-swap", "after-swap"],
)
def test_a_host_dying_mid_group_loses_and_doubles_nothing(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    die: Callable[[pytest.MonkeyPatch], None],
    moved: bool,
) -> None:
    home, repo = knowledge.make_imp(tmp_path)
    base = main_commit(repo)
    jobs = one_note_jobs(repo, 6)

    die(monkeypatch)
    outcomes = land_together(home, jobs)
    monkeypatch.undo()

    # Nobody got a result: every caller saw the host go down.
    assert all(isinstance(o, HostDied) for o in outcomes), outcomes
    after = first_parent_chain(home)
    assert len(after) == (1 + len(jobs) if moved else 1)
    assert after[0] == base

    # Recovery integrates every run again, from fresh calls.
    again = list(results(land_together(home, jobs)))
    assert [r.checkpoint for r in again] == ["integrated"] * len(jobs)
    chain = first_parent_chain(home)
    assert len(chain) == 1 + len(jobs)
    if moved:
        assert chain == after  # found by their trailers, not landed twice
    assert chain[1:] == [r.commit for r in again]
    fresh = open_repo(home, "yuko")
    runs = [fresh[sha].peel(pygit2.Commit).message_trailers["Impyard-Run"] for sha in chain[1:]]
    assert runs == [j.run for j in jobs]
    publish_origin(home, "yuko")  # what serve's recovery does after a crash
    assert git("-C", home.origin("yuko"), "rev-parse", "main").stdout.strip() == chain[-1]
    knowledge.assert_fsck_clean(home.repo("yuko"))
    knowledge.assert_fsck_clean(home.origin("yuko"))


def test_a_pass_takes_up_what_the_last_pass_knew_landed_since_a_base(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from impyard.knowledge.validation.rechecks import LandedSince

    home, repo = knowledge.make_imp(tmp_path)
    reads: list[tuple[str, str]] = []
    real = LandedSince.read.__func__  # type: ignore[attr-defined]

    def counted(cls: type[LandedSince], r: pygit2.Repository, base: str, head: str) -> LandedSince:
        reads.append((base, head))
        return real(cls, r, base, head)

    monkeypatch.setattr(LandedSince, "read", classmethod(counted))
    first, second, third = one_note_jobs(repo, 3)
    assert first.integrate(home).checkpoint == "integrated"
    assert second.integrate(home).checkpoint == "integrated"
    assert len(reads) == 1, "the second pass used what the first knew"
    # Main moved outside the lane: what the last pass knew no longer ends at main.
    repo = open_repo(home, "yuko")
    sig = pygit2.Signature("owner", "owner@localhost")
    head = repo[main_commit(repo)].peel(pygit2.Commit)
    edit = repo.create_commit("refs/heads/main", sig, sig, "edit\n", head.tree.id, [head.id])
    reads.clear()
    assert third.integrate(home).checkpoint == "integrated"
    assert reads == [(third.base, str(edit))], "read again, up to the chain's start"
    repo = open_repo(home, "yuko")
    runs = [
        c.message_trailers.get("Impyard-Run")
        for c in lane_module.commits_since(repo, first.base, main_commit(repo))
    ]
    assert runs == [third.run, None, second.run, first.run]


def test_a_pass_edits_the_directories_the_last_pass_parsed_unless_main_moved_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home, repo = knowledge.make_imp(tmp_path)
    reads: list[bytes] = []
    real = lane_module._Chain._read_tree

    def counted(chain: lane_module._Chain, oid: bytes) -> bytes:
        reads.append(oid)
        return real(chain, oid)

    monkeypatch.setattr(lane_module._Chain, "_read_tree", counted)
    first, second, third = one_note_jobs(repo, 3)
    assert first.integrate(home).checkpoint == "integrated"
    assert reads, "the first pass read the trees it edits"
    reads.clear()
    assert second.integrate(home).checkpoint == "integrated"
    assert reads == [], "the second pass edited what the first had parsed"
    # Main moved outside the lane, into the same directory: its trees are read again.
    repo = open_repo(home, "yuko")
    outside_path, outside_text = knowledge.note(namespace(9), 1, slug="outside")
    outside = knowledge.change_of(repo, {outside_path: outside_text})
    sig = pygit2.Signature("owner", "owner@localhost")
    head = repo[main_commit(repo)].peel(pygit2.Commit)
    index = pygit2.Index()
    index.read_tree(head.tree)
    state = outside.written[outside_path]
    index.add(pygit2.IndexEntry(outside_path, pygit2.Oid(hex=state.blob), pygit2.GIT_FILEMODE_BLOB))
    tree = index.write_tree(repo)
    repo.create_commit("refs/heads/main", sig, sig, "edit\n", tree, [head.id])
    assert third.integrate(home).checkpoint == "integrated"
    assert reads, "trees main changed outside the lane are read, not taken from the last pass"
    paths = knowledge.tree_paths(open_repo(home, "yuko"))
    for job in (first, second, third):
        assert set(job.change.written) <= paths
    assert outside_path in paths
    knowledge.assert_fsck_clean(home.repo("yuko"))
