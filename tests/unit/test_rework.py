"""Rework without a box: the policy key an overlay may only lower, the names and ids a
rework checkout's files get (and that the snapshot reads them as the run's own change),
and an older queue file gaining the rework columns."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
from pathlib import Path

import pygit2
import pytest

from impyard.home import Home
from impyard.knowledge.change import KnowledgeLimits, Violation
from impyard.knowledge.checkouts.checkout import CheckoutKind, prepare_checkout
from impyard.knowledge.checkouts.seed import (
    SeedFile,
    SeedPlan,
    plan_seed,
    rename_into,
    rewrite_id,
    seed_checkout,
)
from impyard.knowledge.checkouts.snapshot import snapshot
from impyard.knowledge.integration.lane import candidate_ref
from impyard.knowledge.store.repo import main_commit
from impyard.knowledge.validation.violations import digest
from impyard.queue import tasks
from impyard.queue.db import connect
from impyard.runs.drive.endings import digest_fields
from impyard.runs.provision.rework import FILE_CHARS, LINE_CHARS, SECTION_CHARS, task_text
from impyard.runs.records.model import ReworkOrigin
from tests.helpers import repo as knowledge
from tests.helpers.checkout import BASE_FILES, IMP, OWNER, commit, make_repo
from tests.helpers.cli import Cli
from tests.helpers.policy import edit_org
from tests.helpers.repo import NS, RUN
from tests.unit.test_repair import write_manifest

OLD, NEW = "n_0123456789ab", "n_ba9876543210"


def write_overlay(home: Path, imp: str, text: str) -> Path:
    path = home / "policy" / "imps" / f"{imp}.toml"
    path.write_text(text)
    return path


def test_an_overlay_may_lower_rework_attempts_but_never_raise_them(cli: Cli) -> None:
    assert cli("init").code == 0
    edit_org(cli.home, "rework_attempts = 0", "rework_attempts = 2")
    write_overlay(cli.home, "yuko", "[review]\nrework_attempts = 1\n")
    deployed = cli("deploy")
    assert deployed.code == 0, deployed.stderr
    shown = json.loads(cli("policy", "show", "yuko", "--json").stdout)
    assert shown["values"]["review.rework_attempts"] == {
        "overlay_rule": "lower",
        "source": "overlay",
        "value": 1,
    }

    path = write_overlay(cli.home, "yuko", "[review]\nrework_attempts = 3\n")
    refused = cli("deploy")
    assert refused.code == 1
    assert f"{path}: review.rework_attempts:" in refused.stderr
    assert "rule enlarges-limit" in refused.stderr


def test_the_org_default_queues_no_rework(cli: Cli) -> None:
    assert cli("init").code == 0
    assert cli("imp", "create", "yuko").code == 0
    shown = json.loads(cli("policy", "show", "yuko", "--json").stdout)
    assert shown["values"]["review.rework_attempts"]["value"] == 0
    assert "review.rework_attempts" in cli("policy", "show", "yuko").stdout


def test_a_record_in_the_refused_runs_namespace_is_renamed_into_the_new_one() -> None:
    assert rename_into(f"records/vendors/acme--{OLD}_3.md", OLD, NEW) == (
        f"records/vendors/acme--{NEW}_3.md"
    )
    # Anything else keeps its name: fixing a bad name is the box's job.
    for path in ("records/Linux FS/x.md", "organization/index.md", f"notes/a--{OLD}_1.md"):
        assert rename_into(path, OLD, NEW) == path


def test_only_the_frontmatter_id_is_rewritten() -> None:
    note = f"---\nid: {OLD}_3\ncreated_at: 2026-01-01T00:00:00Z\n---\nid: {OLD}_3 in the body\n"
    assert rewrite_id(note.encode(), OLD, NEW).decode() == note.replace(
        f"id: {OLD}_3\ncreated", f"id: {NEW}_3\ncreated"
    )
    assert rewrite_id(b"no frontmatter\n", OLD, NEW) == b"no frontmatter\n"


def test_an_older_queue_file_gains_the_rework_columns(tmp_path: Path) -> None:
    db = tmp_path / "impyard.db"
    old = sqlite3.connect(db)
    old.executescript(
        "CREATE TABLE tasks (id TEXT PRIMARY KEY, imp TEXT NOT NULL, prompt TEXT NOT NULL,"
        " reorganize INTEGER NOT NULL DEFAULT 0, channel TEXT, state TEXT NOT NULL,"
        " created_at TEXT NOT NULL, seq INTEGER NOT NULL, started_at TEXT, finished_at TEXT,"
        " run_id TEXT, checkpoint TEXT, error TEXT);"
        "INSERT INTO tasks (id, imp, prompt, state, created_at, seq)"
        " VALUES ('task-000000000001', 'yuko', 'p', 'queued', '2026-01-01T00:00:00Z', 1);"
    )
    old.close()
    conn = connect(db)
    try:
        [kept] = tasks.list_tasks(conn)
        assert (kept.id, kept.rework_of, kept.rework) == ("task-000000000001", None, None)
        link = tasks.ReworkLink(of="run-x", root=None, attempt=1, details={"of": "run-x"})
        added = tasks.add(conn, "yuko", "p", rework=link)
        assert (added.rework_of, added.rework_root, added.rework_attempt) == (
            "run-x",
            added.id,
            1,
        )
        assert [t.id for t in tasks.reworks_of(conn, "run-x")] == [added.id]
    finally:
        conn.close()


@pytest.mark.parametrize("kind", ["overlay", "copy"])
def test_seeded_files_are_the_runs_own_change_in_either_checkout(
    tmp_path: Path, kind: CheckoutKind
) -> None:
    home = Home(tmp_path / "home")
    repo = make_repo(home)
    base = commit(repo, dict(BASE_FILES))
    acme = "records/vendors/acme--n_000000000000_1.md"
    refused = commit(
        repo,
        {
            acme: b"acme, edited\n",  # an existing record: its fix is to undo this
            f"records/vendors/initech--{OLD}_1.md": f"---\nid: {OLD}_1\n---\nx\n".encode(),
            "records/.hidden.md": b"never written\n",
        },
        parent=base,
    )
    plan = plan_seed(repo, refused, OLD, NEW)
    assert plan.skipped == [("records/.hidden.md", "hidden-path: hidden path segment '.hidden.md'")]
    checkout = prepare_checkout(home, IMP, "run-1", base, kind, OWNER)
    seed_checkout(repo, checkout, plan, OWNER)

    change = snapshot(repo, checkout, KnowledgeLimits())
    renamed = f"records/vendors/initech--{NEW}_1.md"
    assert sorted(change.written) == [acme, renamed]
    assert change.problems == [] and change.deleted == set()
    blob = repo[change.written[renamed].blob]
    assert isinstance(blob, pygit2.Blob) and blob.data == f"---\nid: {NEW}_1\n---\nx\n".encode()
    st = os.lstat(checkout.root / renamed)
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (*OWNER, 0o644)


def test_huge_unknown_frontmatter_keys_are_cut_wherever_the_refusal_is_kept(
    tmp_path: Path,
) -> None:
    """Ten notes, each with a 60,000-character unknown frontmatter key: the manifest, the
    journal's violations, the candidate's commit message and the rework's task file each
    quote the keys cut, saying how much, and stay small."""
    home, repo = knowledge.make_imp(tmp_path)
    key = "k" * 60_000
    files = {
        knowledge.note_path(number=n): knowledge.note_text(f"{NS}_{n}")
        .replace("\n---\n", f"\n{key}: x\n---\n", 1)
        .encode()
        for n in range(1, 11)
    }
    base = main_commit(repo)
    result = knowledge.integrate_change(home, knowledge.change_of(repo, files), base)
    assert result.checkpoint == "rejected"
    found = digest(result.violations)  # what the manifest and the journal's event keep
    write_manifest(
        home,
        base,
        checkpoint="rejected",
        candidate_ref=result.candidate_ref,
        **digest_fields(found),
    )
    home.run_task(RUN).write_text("Find the vendors that ship SSO.\n")
    cut_key = f"[cut {len(key) - 60:,} characters]"

    assert len(found.kept) == 10
    assert all(cut_key in v["message"] for v in found.kept)
    assert len(json.dumps(found.kept)) < 10_000
    assert home.manifest(RUN).stat().st_size < 20_000
    message = repo.revparse_single(candidate_ref(RUN)).peel(pygit2.Commit).message
    assert len(message) < 10_000 and message.count(cut_key) == 10

    shown = Cli(home=home.root)("candidates", "rework", RUN, "--dry-run", "--json")
    assert shown.code == 0, shown.stderr
    text = json.loads(shown.stdout)["task_text"]
    assert len(text) < 20_000 and text.count(cut_key) == 10
    assert max(len(line) for line in text.splitlines()) < 1_000


def test_a_rework_task_file_bounds_each_line_each_section_and_the_whole() -> None:
    """A refused run's record may hold violations quoting long paths and many files (one
    restored, or written before messages were bounded): each quoted line is cut to its
    bound, the violations and the file list each to theirs, and the owner's note after
    them stays; every cut says how much."""
    path = f"records/{'d' * 200}/" * 100 + "x.md"  # longer than any path a box can leave
    origin = ReworkOrigin(
        of=RUN,
        origin=RUN,
        kind="candidate",
        ref=candidate_ref(RUN),
        commit="0" * 40,
        namespace=NS,
        note="Keep it short.",
        violations=[Violation(path, "frontmatter", "m" * 60_000) for _ in range(100)],
        violations_total=100,
    )
    name = f"records/vendors/{'f' * 200}"
    many = [SeedFile(f"{name}-{n}.md", f"{name}-{n}.md", "0" * 40) for n in range(5_000)]
    text = task_text(origin, "Find vendors.", NS, SeedPlan(NS, NS, files=many))

    lines = text.splitlines()
    assert max(len(line) for line in lines) <= LINE_CHARS
    assert len(text) <= FILE_CHARS
    quoted = [line for line in lines if line.startswith(f"- {path[:100]}")]
    assert quoted and all(line.endswith(" characters]") for line in quoted)
    cut_sections = [line for line in lines if line.startswith("… [cut ")]
    assert len(cut_sections) == 2  # the violations, then the files
    assert "> Keep it short." in lines
    violations = text[text.index("## Violations") : text.index("## The owner's note")]
    assert len(violations) <= SECTION_CHARS + 100
