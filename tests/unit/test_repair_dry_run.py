"""Dry runs of the repair actions through the real CLI (no Docker): ``--dry-run`` on
retry, drop and rework changes nothing (refs, main, the manifest's and the journal's
bytes, the queue, the run's directory) and says what the action then does: the same
outcome, the same violations, the same files, the same task."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pygit2
import pytest

from impyard.home import Home
from impyard.knowledge.checkouts.seed import plan_seed
from impyard.knowledge.store.repo import main_commit
from impyard.queue import tasks
from impyard.queue.db import opened
from impyard.runs.provision.rework import origin_of, task_text
from tests.helpers.cli import Cli
from tests.helpers.git import git
from tests.helpers.repo import NS, OTHER_NS, RUN, make_imp, note_path
from tests.unit.test_repair import (
    OWNER,
    as_process,
    checkpointed_then_refused,
    deploy,
    hostile,
    quarantined,
    refs,
    refused_long_note,
    set_max_file_chars,
)

PROMPT = "Find the vendors that ship SSO."


def untouched(home: Home, repo: pygit2.Repository) -> dict[str, Any]:
    """Everything a repair may change, as bytes and names."""
    with opened(home.db) as conn:
        queued = [(t.id, t.prompt) for t in tasks.list_tasks(conn)]
    run_dir = home.run_dir(RUN)
    return {
        "refs": refs(repo),
        "main": main_commit(repo),
        "manifest": home.manifest(RUN).read_bytes(),
        "journal": home.journal.read_bytes() if home.journal.exists() else b"",
        "tasks": queued,
        "run_dir": sorted(p.name for p in run_dir.rglob("*")) if run_dir.exists() else [],
    }


def landed_paths(repo: pygit2.Repository, commit: str) -> list[str]:
    shown = git("-C", repo.path, "diff-tree", "--no-commit-id", "--name-only", "-r", commit)
    return sorted(shown.stdout.split())


@pytest.fixture
def long_note(tmp_path: Path) -> tuple[Home, pygit2.Repository, Cli]:
    """A 640-character note refused under max_file_chars 300, its run's task file kept."""
    home, repo, cli = refused_long_note(tmp_path)
    home.run_task(RUN).write_text(PROMPT + "\n")
    return home, repo, cli


def dry(cli: Cli, *args: str) -> dict[str, Any]:
    done = cli(*args, "--dry-run", "--json", env=OWNER)
    assert done.code == 0, done.stdout + done.stderr
    found: dict[str, Any] = json.loads(done.stdout)
    assert found["dry_run"] is True
    return found


def test_a_dry_run_retry_foretells_the_refusal_then_the_landing_and_changes_nothing(
    long_note: tuple[Home, pygit2.Repository, Cli],
) -> None:
    home, repo, cli = long_note
    before = untouched(home, repo)
    said = dry(cli, "candidates", "retry", RUN)
    assert untouched(home, repo) == before
    assert (said["would_land"], said["landed"], said["outcome"]) == (False, False, "rejected")
    assert [(v["path"], v["rule"]) for v in said["violations"]] == [(note_path(), "file-too-large")]
    human = cli("candidates", "retry", RUN, "--dry-run", env=OWNER)
    assert human.code == 0, human.stderr
    assert f"dry run: {RUN} would be rejected (checkpoint 1, from the ref)" in human.stdout
    assert f"  {note_path()}: file-too-large:" in human.stdout
    assert untouched(home, repo) == before

    refused = cli("candidates", "retry", RUN, "--json", env=OWNER)
    assert refused.code == 3
    did = json.loads(refused.stdout)
    assert did["violations"] == said["violations"] and did["checkpoint"] == said["checkpoint"]

    set_max_file_chars(home, 1000)
    deploy(cli)
    before = untouched(home, repo)
    said = dry(cli, "candidates", "retry", RUN)
    assert untouched(home, repo) == before
    assert (said["would_land"], said["outcome"], said["commit"]) == (True, "integrated", None)
    assert (said["written"], said["deleted"], said["violations"]) == ([note_path()], [], [])
    human = cli("candidates", "retry", RUN, "--dry-run", env=OWNER)
    assert "would land 1 written and 0 deleted file(s) on main" in human.stdout
    assert f"  write   {note_path()}" in human.stdout and "nothing was changed" in human.stdout

    landed = cli("candidates", "retry", RUN, "--json", env=OWNER)
    assert landed.code == 0, landed.stderr
    did = json.loads(landed.stdout)
    assert did["landed"] and did["checkpoint"] == said["checkpoint"]
    assert did["written"] == said["written"] == landed_paths(repo, did["commit"])


def test_a_dry_run_retry_replays_onto_mains_head_as_the_lane_does(
    long_note: tuple[Home, pygit2.Repository, Cli],
) -> None:
    """Main gained the same path after the run's base: validation against the base
    passes, and only the lane's replay onto main's head finds the collision."""
    home, repo, cli = long_note
    set_max_file_chars(home, 1000)
    deploy(cli)
    head = repo[main_commit(repo)].peel(pygit2.Commit)
    builder = repo.TreeBuilder(head.tree)
    records = repo.TreeBuilder()
    vendors = repo.TreeBuilder()
    vendors.insert(
        f"acme--{NS}_1.md", repo.create_blob(b"landed by hand\n"), pygit2.GIT_FILEMODE_BLOB
    )
    records.insert("vendors", vendors.write(), pygit2.GIT_FILEMODE_TREE)
    builder.insert("records", records.write(), pygit2.GIT_FILEMODE_TREE)
    sig = pygit2.Signature("owner", "owner@example.com")
    repo.create_commit("refs/heads/main", sig, sig, "by hand", builder.write(), [head.id])
    before = untouched(home, repo)
    said = dry(cli, "candidates", "retry", RUN)
    assert untouched(home, repo) == before
    assert said["would_land"] is False and said["outcome"] == "conflict"
    assert [v["path"] for v in said["violations"]] == [note_path()]

    refused = cli("candidates", "retry", RUN, "--json", env=OWNER)
    assert refused.code == 5, refused.stdout + refused.stderr
    did = json.loads(refused.stdout)
    assert (did["outcome"], did["violations"]) == ("conflict", said["violations"])


def test_a_dry_run_is_refused_as_the_retry_is_when_there_is_nothing_to_do(
    long_note: tuple[Home, pygit2.Repository, Cli],
) -> None:
    home, repo, cli = long_note
    assert cli("candidates", "drop", RUN, env=OWNER).code == 0
    before = untouched(home, repo)
    for dry_run in (("--dry-run",), ()):
        done = cli("candidates", "retry", RUN, *dry_run, env=OWNER)
        assert done.code == 2 and "dropped by alice" in done.stderr
    assert untouched(home, repo) == before


def test_a_quarantine_dry_run_reads_the_kept_checkout_and_leaves_it(tmp_path: Path) -> None:
    home, repo = make_imp(tmp_path)
    quarantined(home, repo, hostile)
    before = untouched(home, repo)
    cli = as_process(home)
    done = cli("quarantine", "retry", RUN, "--dry-run", "--json", env=OWNER, timeout=60)
    assert done.code == 0, done.stderr
    said = json.loads(done.stdout)
    assert untouched(home, repo) == before
    assert (said["source"], said["would_land"]) == ("checkout", False)
    refused = cli("quarantine", "retry", RUN, "--json", env=OWNER, timeout=60)
    assert refused.code == 3
    assert json.loads(refused.stdout)["violations"] == said["violations"]
    assert {v["rule"] for v in said["violations"]} == {"symlink", "special-file"}

    before = untouched(home, repo)
    said = dry(Cli(home=home.root), "quarantine", "retry", RUN, "--from-ref")
    assert said["would_land"] and said["written"] == [f"records/vendors/acme--{NS}_1.md"]
    assert untouched(home, repo) == before


def test_a_dry_run_drop_names_what_the_drop_then_removes(tmp_path: Path) -> None:
    home, repo = make_imp(tmp_path)
    cli = Cli(home=home.root)
    quarantined(home, repo, hostile)
    space = home.run_space(RUN)
    before = untouched(home, repo)
    said = dry(cli, "quarantine", "drop", RUN)
    assert untouched(home, repo) == before and space.exists()
    commit = str(repo.lookup_reference(f"refs/quarantine/{RUN}").target)
    assert (said["ref"], said["commit"], said["checkout_removed"]) == (
        f"refs/quarantine/{RUN}",
        commit,
        True,
    )
    assert str(space) in said["space_paths"]
    human = cli("quarantine", "drop", RUN, "--dry-run", env=OWNER)
    assert human.stdout.startswith(f"dry run: would drop refs/quarantine/{RUN} ({commit})")
    assert "and remove the kept checkout" in human.stdout and f"remove  {space}" in human.stdout

    dropped = cli("quarantine", "drop", RUN, "--json", env=OWNER)
    assert dropped.code == 0, dropped.stderr
    did = json.loads(dropped.stdout)
    assert (did["commit"], did["space_paths"], did["dry_run"]) == (
        said["commit"],
        said["space_paths"],
        False,
    )
    assert not space.exists()


def test_a_dry_run_rework_shows_the_task_the_rework_then_queues(
    long_note: tuple[Home, pygit2.Repository, Cli],
) -> None:
    home, repo, cli = long_note
    note = "Cut the note to its first sentence."
    before = untouched(home, repo)
    said = dry(cli, "candidates", "rework", RUN, "--note", note)
    assert untouched(home, repo) == before
    assert (said["imp"], said["mode"], said["rework_of"], said["rework_attempt"]) == (
        "yuko",
        "append",
        RUN,
        1,
    )
    assert said["prompt"] == PROMPT and said["note"] == note
    assert said["files"] == [{"path": note_path(), "was": note_path()}]
    [violation] = said["violations"]
    text = said["task_text"]
    new = said["new_namespace"]
    quoted = f"- {note_path(new)}: file-too-large: {violation['message']}"
    for part in (f"> {PROMPT}", quoted, f"> {note}", f"- {note_path(new)} (was {note_path()})"):
        assert part in text
    human = cli("candidates", "rework", RUN, "--note", note, "--dry-run", env=OWNER)
    assert human.code == 0 and "dry run: would queue a rework of" in human.stdout
    assert quoted in human.stdout and "nothing was queued" in human.stdout
    assert untouched(home, repo) == before

    queued = cli("candidates", "rework", RUN, "--note", note, "--json", env=OWNER)
    assert queued.code == 0, queued.stderr
    task = json.loads(queued.stdout)
    assert (task["prompt"], task["rework_of"], task["rework_attempt"]) == (
        said["prompt"],
        said["rework_of"],
        said["rework_attempt"],
    )
    with opened(home.db) as conn:
        found = tasks.find(conn, task["id"])
    assert found is not None
    origin = origin_of(found)
    assert origin is not None
    # The task file its run reads is the preview's, in the namespace that run is issued.
    seeded = plan_seed(repo, origin.commit, NS, OTHER_NS)
    assert task_text(origin, found.prompt, OTHER_NS, seeded) == text.replace(new, OTHER_NS)


def test_a_dry_run_retry_of_a_run_that_checkpointed_says_what_it_would_keep_back(
    tmp_path: Path,
) -> None:
    """Checkpoint 1 landed note 1; the exit rewrote it and added a too-long note 2. After
    the limit is raised the dry run says: checkpoint 2, note 2 written, note 1's rewrite
    kept back at the candidate ref; the retry then does exactly that."""
    home, repo, cli = checkpointed_then_refused(tmp_path)
    one, two = note_path(number=1), note_path(number=2)
    set_max_file_chars(home, 1000)
    deploy(cli)
    before = untouched(home, repo)
    said = dry(cli, "candidates", "retry", RUN)
    assert untouched(home, repo) == before
    assert (said["would_land"], said["checkpoint"], said["written"]) == (True, 2, [two])
    assert [(v["path"], v["rule"]) for v in said["violations"]] == [(one, "checkpointed")]
    assert said["candidate_ref"] == f"refs/candidates/{RUN}"
    human = cli("candidates", "retry", RUN, "--dry-run", env=OWNER).stdout
    assert f"would keep back at refs/candidates/{RUN}:\n  {one}: checkpointed:" in human

    done = cli("candidates", "retry", RUN, "--json", env=OWNER)
    assert done.code == 0, done.stderr
    did = json.loads(done.stdout)
    for key in ("checkpoint", "written", "deleted", "violations", "candidate_ref"):
        assert did[key] == said[key], key
    assert landed_paths(repo, did["commit"]) == [two]
