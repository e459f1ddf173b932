"""Bulk deletions wait for the owner: a change deleting more than
``knowledge.max_deletions`` files is held as a candidate, listed as held, previewed and
landed by ``candidates approve`` (once), and never by a plain retry."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pygit2
import pytest

from impyard.home import Home
from impyard.knowledge.integration.lane import LaneResult, candidate_ref
from impyard.knowledge.store.repo import main_commit
from impyard.runs.records import manifest as manifests
from tests.helpers.cli import Cli
from tests.helpers.repo import (
    RUN,
    change_of,
    integrate_change,
    make_imp,
    run_id,
    tree_paths,
)
from tests.helpers.runs import write_run

OWNER = {"USER": "alice"}
INDEXES = [f"organization/topic-{n:02}.md" for n in range(25)]


def reorganize(home: Home, repo: pygit2.Repository, run: str, **change: Any) -> Any:
    base = main_commit(repo)
    return integrate_change(home, change_of(repo, **change), base, run=run, mode="reorganize")


def record_refusal(home: Home, result: LaneResult, *, base: str, **fields: Any) -> None:
    """The record of run RUN, whose exit the lane refused with ``result``."""
    write_run(
        home, RUN, base_commit=base, state="finished", checkpoint="rejected",
        candidate_ref=result.candidate_ref, validation_errors=result.violations, **fields,
    )  # fmt: skip


@pytest.fixture
def held(tmp_path: Path) -> tuple[Home, pygit2.Repository, Cli, str]:
    """25 indexes on main, then a reorganize run that deleted them all, held."""
    home, repo = make_imp(tmp_path)
    files = {path: b"# Index\n" for path in INDEXES}
    assert reorganize(home, repo, run_id(1), files=files).checkpoint == "integrated"
    before = main_commit(repo)
    result = reorganize(home, repo, RUN, deleted=INDEXES)
    assert result.checkpoint == "rejected" and result.candidate_ref == candidate_ref(RUN)
    record_refusal(
        home, result, base=before, mode="reorganize", reason="held: bulk-delete (25 files)"
    )
    return home, repo, Cli(home=home.root), before


def test_a_change_deleting_more_than_the_limit_is_held_with_one_reason(
    held: tuple[Home, pygit2.Repository, Cli, str],
) -> None:
    home, repo, cli, before = held
    [violation] = manifests.read(home, RUN).validation_errors
    assert violation.rule == "bulk-delete"
    assert violation.message.startswith("held: bulk-delete (25 files): more than ")
    assert f"impyard candidates approve {RUN}" in violation.message
    assert main_commit(repo) == before
    [row] = json.loads(cli("candidates", "list", "--json").stdout)
    assert (row["held"], row["deleted"]) == ("bulk-delete (25 files)", 25)
    assert " held " in cli("candidates", "list").stdout


def test_twenty_deletions_land_on_their_own(tmp_path: Path) -> None:
    home, repo = make_imp(tmp_path)
    files = {path: b"# Index\n" for path in INDEXES}
    assert reorganize(home, repo, run_id(1), files=files).checkpoint == "integrated"
    assert reorganize(home, repo, RUN, deleted=INDEXES[:20]).checkpoint == "integrated"


def test_a_retry_does_not_land_it_and_says_to_approve(
    held: tuple[Home, pygit2.Repository, Cli, str],
) -> None:
    _, repo, cli, before = held
    retried = cli("candidates", "retry", RUN, env=OWNER)
    assert retried.code == 3
    assert f"impyard candidates approve {RUN} --dry-run" in retried.stdout
    assert main_commit(repo) == before


def test_approval_is_previewed_then_lands_once_as_the_owners_decision(
    held: tuple[Home, pygit2.Repository, Cli, str],
) -> None:
    home, repo, cli, before = held
    preview = cli("candidates", "approve", RUN, "--dry-run", "--json", env=OWNER)
    assert preview.code == 0, preview.stderr
    shown = json.loads(preview.stdout)
    assert shown["would_land"] and shown["dry_run"] and shown["deleted"] == INDEXES
    text = cli("candidates", "approve", RUN, "--dry-run", env=OWNER).stdout
    assert all(f"delete  {path}" in text for path in INDEXES)
    assert main_commit(repo) == before and candidate_ref(RUN) in repo.references

    approved = cli("candidates", "approve", RUN, "--json", env=OWNER)
    assert approved.code == 0, approved.stdout + approved.stderr
    landed = json.loads(approved.stdout)
    assert landed["landed"] and landed["deleted"] == INDEXES
    assert main_commit(repo) == landed["commit"]
    assert not any(path.startswith("organization/topic-") for path in tree_paths(repo))
    m = manifests.read(home, RUN)
    assert (m.checkpoint, m.reason, m.candidate_ref) == ("integrated", None, None)
    assert [(r.action, r.by, r.outcome) for r in m.repairs] == [("approve", "alice", "integrated")]
    events = [json.loads(line) for line in home.journal.read_text().splitlines()]
    [event] = [e for e in events if e["event"] == "repair.approved"]
    assert (event["by"], event["outcome"], event["commit"]) == (
        "alice",
        "integrated",
        m.produced_commit,
    )

    again = cli("candidates", "approve", RUN, env={"USER": "bob"})
    assert again.code == 0, again.stderr
    assert "was approved by alice" in again.stdout and "nothing changed" in again.stdout
    assert main_commit(repo) == landed["commit"]
    assert len(manifests.read(home, RUN).repairs) == 1


def test_only_a_held_change_is_approved(tmp_path: Path) -> None:
    home, repo = make_imp(tmp_path)
    # A change refused for its content (a record deleted in append mode is never allowed).
    base = main_commit(repo)
    result = integrate_change(home, change_of(repo, deleted=["README.md"]), base)
    assert result.checkpoint == "rejected"
    record_refusal(home, result, base=base, mode="append")
    refused = Cli(home=home.root)("candidates", "approve", RUN)
    assert refused.code == 2 and "is not held for approval" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert main_commit(repo) == base


def test_the_console_offers_approve_for_a_held_change_only_and_previews_every_deletion(
    held: tuple[Home, pygit2.Repository, Cli, str],
) -> None:
    from tests.helpers.web import console_for, log_in

    home, repo, _, before = held
    console, client = console_for(home.root)
    csrf = log_in(console, client)
    item = client.get(f"/review/candidate/{RUN}").text
    assert f'href="/review/candidate/{RUN}/approve"' in item
    preview = client.get(f"/review/candidate/{RUN}/approve").text
    assert "0 file(s) written and 25 deleted on main" in preview
    assert all(f"<li>delete <code>{path}</code></li>" in preview for path in INDEXES)
    assert main_commit(repo) == before
    done = client.post(f"/review/candidate/{RUN}/approve", data={"csrf": csrf})
    assert done.status_code == 200 and "integrated" in done.text
    assert [(r.action, r.by) for r in manifests.read(home, RUN).repairs] == [("approve", "web")]
    again = client.get(f"/review/candidate/{RUN}/approve")
    assert again.status_code == 404  # nothing is held any more: no candidate to approve


def test_a_change_refused_for_its_content_has_no_approve_button(tmp_path: Path) -> None:
    from tests.helpers.web import console_for, log_in
    from tests.unit.test_repair import LONG_BODY, rejected_candidate

    home, repo = make_imp(tmp_path)
    rejected_candidate(home, repo, {"records/vendors/acme--x_1.md": LONG_BODY.encode()})
    console, client = console_for(home.root)
    log_in(console, client)
    item = client.get(f"/review/candidate/{RUN}").text
    assert f'href="/review/candidate/{RUN}/retry"' in item
    assert "/approve" not in item
