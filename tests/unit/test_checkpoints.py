"""A run that checkpoints more than once, through the lane (no Docker): only what is new
since the last checkpoint lands, checkpointed files are final for the run, the run's own
commits are not collisions, and nothing lands twice."""

from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple

import pygit2

from impyard.home import Home
from impyard.knowledge.change import Change, FileState, KnowledgeLimits, Mode
from impyard.knowledge.imps import open_repo
from impyard.knowledge.integration.lane import LaneResult, find_landed_commit
from impyard.knowledge.store.gitobj import changed_paths
from impyard.knowledge.store.repo import main_commit
from impyard.knowledge.validation.increments import Landed, landed_by, split
from impyard.repair.preserved import tree_change
from impyard.runs.checkpoints.landing import LandedCache, landed_files
from impyard.runs.records.model import CheckpointRecord, Manifest
from tests.helpers import repo as knowledge
from tests.helpers.cli import Cli
from tests.helpers.git import git
from tests.helpers.repo import NS, OTHER_NS, RUN, run_id
from tests.helpers.runs import write_run

LIMITS = KnowledgeLimits()


def checkpoint(
    home: Home,
    change: Change,
    base: str,
    number: int,
    *,
    at_exit: bool,
    landed: Landed,
    run: str = RUN,
    ns: str = NS,
    mode: Mode = "append",
) -> LaneResult:
    return knowledge.integrate_change(
        home,
        change,
        base,
        ns=ns,
        run=run,
        mode=mode,
        limits=LIMITS,
        checkpoint=number,
        at_exit=at_exit,
        landed=landed,
        keep_refused=at_exit,
    )


def commit_paths(repo: pygit2.Repository, sha: str) -> set[str]:
    commit = repo[sha].peel(pygit2.Commit)
    return set(changed_paths(commit.parents[0].tree, commit.tree))


def show(home: Home, rev: str) -> str:
    return git("-C", home.repo("yuko"), "show", rev).stdout


def show_ref(repo: pygit2.Repository, ref: str) -> str:
    return str(repo.lookup_reference(ref).target)


class NoteOneCheckpointed(NamedTuple):
    """yuko's data root and repository, run RUN's ``base``, the note ``path`` and ``data``
    its mid-run checkpoint 1 landed (``first``), and what the run has ``landed`` by then."""

    home: Home
    repo: pygit2.Repository
    base: str
    path: str
    data: bytes
    first: LaneResult
    landed: Landed


def note_one_checkpointed(tmp_path: Path) -> NoteOneCheckpointed:
    """Run RUN of a new imp yuko, after a mid-run checkpoint landed its note 1."""
    home, repo = knowledge.make_imp(tmp_path)
    base = main_commit(repo)
    path, data = knowledge.note(number=1)
    first = checkpoint(
        home, knowledge.change_of(repo, {path: data}), base, 1, at_exit=False, landed={}
    )
    landed = landed_by(repo, [first.commit or ""])
    return NoteOneCheckpointed(home, repo, base, path, data, first, landed)


def test_mid_run_then_exit_land_only_what_is_new_with_numbered_trailers(tmp_path: Path) -> None:
    home, repo = knowledge.make_imp(tmp_path)
    base = main_commit(repo)
    one, two = knowledge.note(number=1), knowledge.note(number=2)
    first = checkpoint(
        home, knowledge.change_of(repo, dict([one])), base, 1, at_exit=False, landed={}
    )
    assert first.checkpoint == "integrated" and first.violations == []
    landed = landed_by(repo, [first.commit or ""])
    assert set(landed) == {one[0]}
    # The exit snapshot is the whole run again; only note 2 is new.
    last = checkpoint(
        home, knowledge.change_of(repo, dict([one, two])), base, 2, at_exit=True, landed=landed
    )
    assert last.checkpoint == "integrated" and last.violations == []
    assert commit_paths(repo, last.commit or "") == {two[0]}
    log = git("-C", home.repo("yuko"), "log", "--format=%(trailers:key=Impyard-Checkpoint)", "main")
    assert [line for line in log.stdout.splitlines() if line] == [
        "Impyard-Checkpoint: 2 (exit)",
        "Impyard-Checkpoint: 1 (mid-run)",
    ]
    assert "checkpoint 2" in git("-C", home.repo("yuko"), "log", "-1", "--format=%s").stdout
    assert find_landed_commit(repo, RUN, base, 1) == first.commit
    assert find_landed_commit(repo, RUN, base, 2) == last.commit
    knowledge.assert_fsck_clean(home.repo("yuko"))


def test_a_changed_checkpointed_note_is_refused_while_the_rest_lands(tmp_path: Path) -> None:
    home, repo, base, path, data, _, landed = note_one_checkpointed(tmp_path)
    rewritten = knowledge.note_text(f"{NS}_1", body="A different claim.\n").encode()
    two = knowledge.note(number=2)
    last = checkpoint(
        home,
        knowledge.change_of(repo, {path: rewritten, two[0]: two[1]}),
        base,
        2,
        at_exit=True,
        landed=landed,
    )
    assert last.checkpoint == "integrated"
    assert [(v.path, v.rule) for v in last.violations] == [(path, "checkpointed")]
    assert "changed after a checkpoint landed it" in last.violations[0].message
    assert commit_paths(repo, last.commit or "") == {two[0]}
    assert show(home, f"main:{path}").encode() == data  # main keeps what landed
    # The refused version is kept for the owner, nothing is lost.
    assert last.candidate_ref == f"refs/candidates/{RUN}"
    assert show(home, f"{last.candidate_ref}:{path}").encode() == rewritten
    # It holds the box's final tree: against main, only the refused edit differs.
    differs = git("-C", home.repo("yuko"), "diff", "--name-status", "main", last.candidate_ref)
    assert differs.stdout.splitlines() == [f"M\t{path}"]
    knowledge.assert_fsck_clean(home.repo("yuko"))


def test_deleting_a_checkpointed_note_is_refused_and_it_stays(tmp_path: Path) -> None:
    home, repo, base, path, data, _, landed = note_one_checkpointed(tmp_path)
    last = checkpoint(home, knowledge.change_of(repo, {}), base, 2, at_exit=True, landed=landed)
    assert last.checkpoint == "empty"
    assert [(v.path, v.rule) for v in last.violations] == [(path, "checkpointed")]
    assert "deleted after a checkpoint" in last.violations[0].message
    assert show(home, f"main:{path}").encode() == data
    # The refused state is kept: the box's final tree, without the deleted note, which
    # the candidate names (the run's base never had it, so the tree alone cannot say).
    assert last.candidate_ref == f"refs/candidates/{RUN}"
    assert path not in knowledge.tree_paths(repo, last.candidate_ref)
    differs = git("-C", home.repo("yuko"), "diff", "--name-status", "main", last.candidate_ref)
    assert differs.stdout.splitlines() == [f"D\t{path}"]
    message = git("-C", home.repo("yuko"), "log", "-1", "--format=%B", last.candidate_ref).stdout
    assert f"Impyard-Deleted: {path}" in message.splitlines()
    assert "checkpointed" in message and "deleted after a checkpoint" in message
    assert tree_change(repo, show_ref(repo, last.candidate_ref)).deleted == {path}
    knowledge.assert_fsck_clean(home.repo("yuko"))


def test_a_checkpointed_deletion_is_shown_and_stays_refused_on_retry(tmp_path: Path) -> None:
    """The owner sees the deletion as the run's exit left it: `candidates show` lists the
    checkpointed violation and the note as deleted against main; a retry refuses it again
    and keeps the candidate as it was."""
    home, repo, base, path, data, first, landed = note_one_checkpointed(tmp_path)
    last = checkpoint(home, knowledge.change_of(repo, {}), base, 2, at_exit=True, landed=landed)
    write_run(
        home,
        RUN,
        task_id="task-1",
        base_commit=base,
        state="finished",
        checkpoint="integrated",
        produced_commit=first.commit,
        candidate_ref=last.candidate_ref,
        validation_errors=last.violations,
        checkpoints=[
            CheckpointRecord(number=1, state="integrated", requested_at="t", commit=first.commit)
        ],
    )
    cli = Cli(home=home.root)
    shown = cli("candidates", "show", RUN, "--json")
    assert shown.code == 0, shown.stderr
    found = json.loads(shown.stdout)
    assert [(v["path"], v["rule"]) for v in found["violations"]] == [(path, "checkpointed")]
    assert [(f["path"], f["status"]) for f in found["files"]] == [(path, "deleted")]
    text = cli("candidates", "show", RUN).stdout
    assert path in text and "checkpointed" in text

    kept = show_ref(repo, f"refs/candidates/{RUN}")
    again = cli("candidates", "retry", RUN, "--json", env={"USER": "alice"})
    assert again.code == 3, again.stdout + again.stderr
    result = json.loads(again.stdout)
    assert result["outcome"] == "rejected"
    assert [(v["path"], v["rule"]) for v in result["violations"]] == [(path, "checkpointed")]
    assert show_ref(repo, f"refs/candidates/{RUN}") == kept
    assert show(home, f"main:{path}").encode() == data
    knowledge.assert_fsck_clean(home.repo("yuko"))


def test_a_mid_run_refusal_keeps_no_candidate(tmp_path: Path) -> None:
    home, repo = knowledge.make_imp(tmp_path)
    base = main_commit(repo)
    bad = knowledge.change_of(
        repo, {knowledge.note_path(OTHER_NS, 1): knowledge.note_text(f"{OTHER_NS}_1").encode()}
    )
    result = checkpoint(home, bad, base, 1, at_exit=False, landed={})
    assert result.checkpoint == "rejected" and result.candidate_ref is None
    assert {v.rule for v in result.violations} == {"namespace"}
    assert list(repo.references) == ["refs/heads/main"]
    assert main_commit(repo) == base


def test_the_runs_own_checkpoints_are_not_collisions_with_others_between(
    tmp_path: Path,
) -> None:
    home, repo = knowledge.make_imp(tmp_path)
    base = main_commit(repo)
    one, two = knowledge.note(number=1), knowledge.note(number=2, slug="beta")
    first = checkpoint(
        home, knowledge.change_of(repo, dict([one])), base, 1, at_exit=False, landed={}
    )
    # Another run lands in the same topic meanwhile.
    other = knowledge.note(OTHER_NS, 1)
    between = checkpoint(
        home,
        knowledge.change_of(repo, dict([other])),
        main_commit(repo),
        1,
        at_exit=True,
        landed={},
        run=run_id(5),
        ns=OTHER_NS,
    )
    assert between.checkpoint == "integrated"
    landed = landed_by(repo, [first.commit or ""])
    last = checkpoint(
        home, knowledge.change_of(repo, dict([one, two])), base, 2, at_exit=True, landed=landed
    )
    assert last.checkpoint == "integrated" and last.violations == []
    assert {one[0], two[0], other[0]} <= knowledge.tree_paths(open_repo(home, "yuko"))
    knowledge.assert_fsck_clean(home.repo("yuko"))


def test_the_whole_run_is_validated_a_new_note_reusing_a_checkpointed_id_is_refused(
    tmp_path: Path,
) -> None:
    home, repo = knowledge.make_imp(tmp_path)
    base = main_commit(repo)
    one = knowledge.note(number=1)
    first = checkpoint(
        home, knowledge.change_of(repo, dict([one])), base, 1, at_exit=False, landed={}
    )
    landed = landed_by(repo, [first.commit or ""])
    twin = knowledge.note_path(number=1, slug="twin")
    result = checkpoint(
        home,
        knowledge.change_of(repo, {one[0]: one[1], twin: knowledge.note_text(f"{NS}_1").encode()}),
        base,
        2,
        at_exit=False,
        landed=landed,
    )
    assert result.checkpoint == "rejected"
    assert any(v.rule == "duplicate-id" for v in result.violations)


def test_a_checkpoint_number_lands_once(tmp_path: Path) -> None:
    home, repo = knowledge.make_imp(tmp_path)
    base = main_commit(repo)
    change = knowledge.change_of(repo, dict([knowledge.note()]))
    first = checkpoint(home, change, base, 1, at_exit=False, landed={})
    again = checkpoint(home, change, base, 1, at_exit=False, landed={})
    assert again.checkpoint == "integrated" and again.commit == first.commit
    assert len(git("-C", home.repo("yuko"), "rev-list", "main").stdout.split()) == 2


def test_split_refuses_re_creating_what_a_checkpoint_deleted() -> None:
    """Reorganize: a checkpoint deleted organization/old.md; writing it again is refused
    and kept back, and the run's effective change keeps it deleted."""
    again = FileState(blob="a" * 40, size=3, executable=False)
    landed: Landed = {"organization/old.md": None}
    parts = split(Change(written={"organization/old.md": again}), landed)
    assert [(v.path, v.rule) for v in parts.touched] == [("organization/old.md", "checkpointed")]
    assert "re-created" in parts.touched[0].message
    assert parts.kept_back == {"organization/old.md": again}
    assert "organization/old.md" in parts.effective.deleted
    assert parts.increment.is_empty
    assert parts.rest.written == {"organization/old.md": again}


def test_the_landed_cache_follows_the_manifest_and_starts_over_when_it_is_rewritten(
    tmp_path: Path,
) -> None:
    home, repo = knowledge.make_imp(tmp_path)
    base = main_commit(repo)
    one, two = knowledge.note(number=1), knowledge.note(number=2)
    first = checkpoint(
        home, knowledge.change_of(repo, dict([one])), base, 1, at_exit=False, landed={}
    )
    landed = landed_by(repo, [first.commit or ""])
    second = checkpoint(
        home, knowledge.change_of(repo, dict([one, two])), base, 2, at_exit=False, landed=landed
    )
    m = Manifest(
        run_id=RUN,
        imp="yuko",
        task_id=None,
        channel=None,
        mode="append",
        base_commit=base,
        namespace=NS,
    )
    cache = LandedCache()
    assert cache.files(repo, m) == {}
    m.checkpoints.append(
        CheckpointRecord(number=1, state="integrated", requested_at="t", commit=first.commit)
    )
    assert set(cache.files(repo, m)) == {one[0]}
    m.checkpoints.append(
        CheckpointRecord(number=2, state="integrated", requested_at="t", commit=second.commit)
    )
    assert cache.files(repo, m) == landed_files(repo, m) and set(cache.files(repo, m)) == {
        one[0],
        two[0],
    }
    m.checkpoints.pop(0)  # not a continuation (recovery dropped one): read afresh
    assert set(cache.files(repo, m)) == {two[0]}
