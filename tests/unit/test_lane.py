"""The integration lane: landing, empty, rejected, conflict, idempotence, concurrency."""

from __future__ import annotations

import multiprocessing
import threading
from pathlib import Path

import pygit2
import pytest

from impyard.common.errors import UsageError
from impyard.home import Home
from impyard.knowledge.change import Change, KnowledgeLimits, Mode
from impyard.knowledge.imps import open_repo
from impyard.knowledge.integration.lane import (
    LaneResult,
    Trailers,
    find_landed_commit,
    integrate,
)
from impyard.knowledge.store.repo import main_commit
from impyard.knowledge.validation.sizes import tree_bytes, tree_bytes_full
from tests.helpers import repo as knowledge
from tests.helpers.git import git
from tests.helpers.repo import NS, namespace, run_id

LIMITS = KnowledgeLimits()


def assert_linear(home: Home) -> list[str]:
    shas = git("-C", home.repo("yuko"), "rev-list", "--parents", "main").stdout.splitlines()
    for line in shas:
        assert len(line.split()) <= 2, f"merge commit on main: {line}"
    return [line.split()[0] for line in shas]


def test_one_note_lands_with_trusted_trailers(tmp_path: Path) -> None:
    home, repo = knowledge.make_imp(tmp_path)
    base = main_commit(repo)
    path, data = knowledge.note()
    result = knowledge.integrate_change(home, knowledge.change_of(repo, {path: data}), base)
    assert result.checkpoint == "integrated" and result.violations == []
    assert result.commit == main_commit(open_repo(home, "yuko"))
    commit = repo[result.commit]
    assert commit.parents[0].id == pygit2.Oid(hex=base)
    assert (commit.author.name, commit.author.email) == ("yuko", "yuko@impyard.local")
    assert commit.committer.email == "impyard@localhost"
    assert commit.message_trailers == {
        "Impyard-Imp": "yuko",
        "Impyard-Run": "run-20260711T120000Z-0123456789",
        "Impyard-Task": "task-1",
        "Impyard-Channel": "-",
        "Impyard-Base": base,
        "Impyard-Mode": "append",
        "Impyard-Runtime": "runc",
        "Impyard-Checkpoint": "1 (exit)",
    }
    assert git("-C", home.repo("yuko"), "show", f"main:{path}").stdout.encode() == data
    # origin follows main
    assert git("-C", home.origin("yuko"), "rev-parse", "main").stdout.strip() == result.commit
    # the size cache is kept exact by the lane
    assert tree_bytes(repo, result.commit) == tree_bytes_full(repo, commit.tree)
    knowledge.assert_fsck_clean(home.repo("yuko"))
    knowledge.assert_fsck_clean(home.origin("yuko"))


def test_empty_change_makes_no_commit(tmp_path: Path) -> None:
    home, repo = knowledge.make_imp(tmp_path)
    base = main_commit(repo)
    assert knowledge.integrate_change(home, Change(), base) == LaneResult("empty")
    assert main_commit(open_repo(home, "yuko")) == base


def test_rejected_change_keeps_a_candidate_and_main(tmp_path: Path) -> None:
    home, repo = knowledge.make_imp(tmp_path)
    base = main_commit(repo)
    good = knowledge.note(NS, 1)
    change = knowledge.change_of(
        repo, {good[0]: good[1], "README.md": b"mine\n", ".git/config": b"x"}
    )
    result = knowledge.integrate_change(home, change, base)
    assert result.checkpoint == "rejected"
    assert {(v.path, v.rule) for v in result.violations} == {
        ("README.md", "protected-path"),
        (".git/config", "git-metadata"),
        (".git/config", "protected-path"),
    }
    assert result.candidate_ref == "refs/candidates/run-20260711T120000Z-0123456789"
    assert main_commit(open_repo(home, "yuko")) == base
    candidate = repo.lookup_reference(result.candidate_ref).peel(pygit2.Commit)
    assert candidate.parents[0].id == pygit2.Oid(hex=base)
    paths = knowledge.tree_paths(repo, result.candidate_ref)
    assert good[0] in paths and ".git/config" not in paths
    assert "protected-path" in candidate.message
    # never published
    origin_refs = git("-C", home.origin("yuko"), "for-each-ref", "--format=%(refname)").stdout
    assert origin_refs.split() == ["refs/heads/main"]
    knowledge.assert_fsck_clean(home.repo("yuko"))


def test_path_collision_is_a_conflict_and_keeps_the_candidate(tmp_path: Path) -> None:
    home, repo = knowledge.make_imp(tmp_path)
    base = main_commit(repo)
    path, data = knowledge.note(NS, 1)
    first = knowledge.integrate_change(
        home, knowledge.change_of(repo, {path: data}), base, run=run_id(1)
    )
    assert first.checkpoint == "integrated"
    # a second run (same namespace would be a host bug; path is what collides)
    other = knowledge.change_of(
        repo, {path: knowledge.note_text(f"{NS}_1", body="other\n").encode()}
    )
    second = knowledge.integrate_change(home, other, base, run=run_id(2))
    assert second.checkpoint == "conflict"
    assert [(v.path, v.rule) for v in second.violations] == [(path, "collision")]
    assert second.candidate_ref == f"refs/candidates/{run_id(2)}"
    assert main_commit(open_repo(home, "yuko")) == first.commit
    assert git("-C", home.repo("yuko"), "show", f"{second.candidate_ref}:{path}").stdout.endswith(
        "other\n"
    )
    knowledge.assert_fsck_clean(home.repo("yuko"))


def test_duplicate_id_landed_since_base_is_a_conflict(tmp_path: Path) -> None:
    home, repo = knowledge.make_imp(tmp_path)
    base = main_commit(repo)
    text = knowledge.note_text(f"{NS}_5").encode()
    first = knowledge.integrate_change(
        home,
        knowledge.change_of(repo, {knowledge.note_path(NS, 5, topic="a"): text}),
        base,
        run=run_id(1),
    )
    assert first.checkpoint == "integrated"
    second = knowledge.integrate_change(
        home,
        knowledge.change_of(repo, {knowledge.note_path(NS, 5, topic="b"): text}),
        base,
        run=run_id(2),
    )
    assert second.checkpoint == "conflict"
    assert [(v.path, v.rule) for v in second.violations] == [
        (knowledge.note_path(NS, 5, topic="b"), "duplicate-id")
    ]
    assert main_commit(open_repo(home, "yuko")) == first.commit


def test_different_bases_replay_onto_the_latest_main(tmp_path: Path) -> None:
    home, repo = knowledge.make_imp(tmp_path)
    base = main_commit(repo)
    results = [
        knowledge.integrate_change(
            home,
            knowledge.change_of(repo, dict([knowledge.note(namespace(i), 1)])),
            base,
            ns=namespace(i),
            run=run_id(i),
        )
        for i in range(1, 4)
    ]
    assert [r.checkpoint for r in results] == ["integrated"] * 3
    later = knowledge.integrate_change(
        home,
        knowledge.change_of(repo, dict([knowledge.note(namespace(9), 1)])),
        results[0].commit or "",
        ns=namespace(9),
        run=run_id(9),
    )
    assert later.checkpoint == "integrated"
    paths = knowledge.tree_paths(open_repo(home, "yuko"))
    assert {knowledge.note_path(namespace(i), 1) for i in (1, 2, 3, 9)} <= paths
    assert len(assert_linear(home)) == 5
    knowledge.assert_fsck_clean(home.repo("yuko"))


def test_reintegrating_a_landed_run_never_lands_twice(tmp_path: Path) -> None:
    home, repo = knowledge.make_imp(tmp_path)
    base = main_commit(repo)
    change = knowledge.change_of(repo, dict([knowledge.note()]))
    first = knowledge.integrate_change(home, change, base)
    assert find_landed_commit(repo, "run-20260711T120000Z-0123456789", base) == first.commit
    assert find_landed_commit(repo, run_id(77), base) is None
    again = knowledge.integrate_change(home, change, base)
    assert again == LaneResult("integrated", commit=first.commit)
    assert len(assert_linear(home)) == 2


def test_reorganize_replays_organization_changes(tmp_path: Path) -> None:
    home, repo = knowledge.make_imp(tmp_path)
    base = main_commit(repo)
    append = knowledge.integrate_change(
        home,
        knowledge.change_of(repo, dict([knowledge.note(namespace(1), 1)])),
        base,
        ns=namespace(1),
        run=run_id(1),
    )
    reorg = knowledge.change_of(
        repo,
        {"organization/index.md": b"- vendors\n", **dict([knowledge.note(namespace(2), 1)])},
        deleted={"organization/README.md"},
    )
    result = knowledge.integrate_change(
        home, reorg, base, ns=namespace(2), run=run_id(2), mode="reorganize"
    )
    assert result.checkpoint == "integrated", result.violations
    paths = knowledge.tree_paths(open_repo(home, "yuko"))
    assert "organization/index.md" in paths and "organization/README.md" not in paths
    assert (
        knowledge.note_path(namespace(1), 1) in paths
    )  # the append that landed meanwhile survives
    assert repo[result.commit or ""].message_trailers["Impyard-Mode"] == "reorganize"
    assert append.commit in assert_linear(home)
    knowledge.assert_fsck_clean(home.repo("yuko"))


def test_conflicting_organization_change_since_base_is_a_conflict(tmp_path: Path) -> None:
    home, repo = knowledge.make_imp(tmp_path)
    base = main_commit(repo)
    one = knowledge.change_of(repo, {"organization/a.md": b"a\n"})
    assert knowledge.integrate_change(
        home, one, base, ns=namespace(1), run=run_id(1), mode="reorganize"
    ).checkpoint == ("integrated")
    landed = main_commit(open_repo(home, "yuko"))
    two = knowledge.change_of(repo, {"organization/b.md": b"b\n"})
    result = knowledge.integrate_change(
        home, two, base, ns=namespace(2), run=run_id(2), mode="reorganize"
    )
    assert result.checkpoint == "conflict"
    assert ("organization/a.md", "collision") in {(v.path, v.rule) for v in result.violations}
    assert main_commit(open_repo(home, "yuko")) == landed


def test_repo_size_is_rechecked_against_the_new_head(tmp_path: Path) -> None:
    home, repo = knowledge.make_imp(tmp_path)
    base = main_commit(repo)
    a = knowledge.note(namespace(1), 1)
    b = knowledge.note(namespace(2), 1)
    limits = KnowledgeLimits(max_repo_bytes=tree_bytes(repo, base) + len(a[1]) + len(b[1]) - 1)
    assert (
        knowledge.integrate_change(
            home,
            knowledge.change_of(repo, {a[0]: a[1]}),
            base,
            ns=namespace(1),
            run=run_id(1),
            limits=limits,
        ).checkpoint
        == "integrated"
    )
    landed = main_commit(open_repo(home, "yuko"))
    result = knowledge.integrate_change(
        home,
        knowledge.change_of(repo, {b[0]: b[1]}),
        base,
        ns=namespace(2),
        run=run_id(2),
        limits=limits,
    )
    assert result.checkpoint == "rejected"
    assert [(v.path, v.rule) for v in result.violations] == [(".", "repo-too-large")]
    assert main_commit(open_repo(home, "yuko")) == landed


def integrate_nothing_trailed(home: Home, base: str, mode: Mode, trailers: Trailers) -> LaneResult:
    """The lane's ``integrate`` of an empty change for yuko in ``mode``, with ``trailers``
    passed as they are: :func:`knowledge.integrate_change` would write honest ones, and
    these tests hand the lane trailers that disagree with the call or smuggle a line."""
    return integrate(
        home,
        "yuko",
        Change(),
        base=base,
        namespace=NS,
        mode=mode,
        limits=LIMITS,
        trailers=trailers,
    )


def test_trailer_values_are_checked(tmp_path: Path) -> None:
    home, repo = knowledge.make_imp(tmp_path)
    base = main_commit(repo)
    bad = knowledge.trailers(base)
    with pytest.raises(UsageError):
        integrate_nothing_trailed(home, base, "reorganize", bad)
    from dataclasses import replace

    with pytest.raises(UsageError, match="Impyard-Channel"):
        integrate_nothing_trailed(
            home, base, "append", replace(bad, channel="a\nImpyard-Run: forged")
        )


def test_threads_integrating_at_once_all_land(tmp_path: Path) -> None:
    home, repo = knowledge.make_imp(tmp_path)
    base = main_commit(repo)
    changes = [knowledge.change_of(repo, dict([knowledge.note(namespace(i), 1)])) for i in range(8)]
    results: list[LaneResult] = []
    lock = threading.Lock()

    def work(i: int) -> None:
        r = knowledge.integrate_change(home, changes[i], base, ns=namespace(i), run=run_id(i))
        with lock:
            results.append(r)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(r.checkpoint for r in results) == ["integrated"] * 8
    assert len(assert_linear(home)) == 9
    assert {knowledge.note_path(namespace(i), 1) for i in range(8)} <= knowledge.tree_paths(
        open_repo(home, "yuko")
    )
    knowledge.assert_fsck_clean(home.repo("yuko"))


def _process_worker(
    root: str,
    base: str,
    index: int,
    start: multiprocessing.synchronize.Event,
    out: multiprocessing.Queue[str],
) -> None:
    home = Home(Path(root))
    repo = open_repo(home, "yuko")
    change = knowledge.change_of(repo, dict([knowledge.note(namespace(100 + index), 1)]))
    start.wait()
    result = knowledge.integrate_change(
        home, change, base, ns=namespace(100 + index), run=run_id(100 + index)
    )
    out.put(result.checkpoint)


def test_two_processes_integrating_at_once_both_land(tmp_path: Path) -> None:
    home, repo = knowledge.make_imp(tmp_path)
    base = main_commit(repo)
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Event()
    out: multiprocessing.Queue[str] = ctx.Queue()
    procs = [
        ctx.Process(target=_process_worker, args=(str(home.root), base, i, start, out))
        for i in range(2)
    ]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    assert sorted(out.get(timeout=10) for _ in procs) == ["integrated", "integrated"]
    paths = knowledge.tree_paths(open_repo(home, "yuko"))
    assert {knowledge.note_path(namespace(100), 1), knowledge.note_path(namespace(101), 1)} <= paths
    assert len(assert_linear(home)) == 3
    knowledge.assert_fsck_clean(home.repo("yuko"))
    assert git("-C", home.origin("yuko"), "rev-parse", "main").stdout.strip() == main_commit(
        open_repo(home, "yuko")
    )
