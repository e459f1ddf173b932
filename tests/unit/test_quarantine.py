"""Quarantine keeps what a crashed run left, off main, and never stores refused entries."""

from __future__ import annotations

from pathlib import Path

import pygit2
import pytest

from impyard.common.errors import UsageError
from impyard.knowledge.change import Violation
from impyard.knowledge.integration.quarantine import not_kept_lines, quarantine, quarantine_ref
from impyard.knowledge.store.repo import main_commit
from tests.helpers.git import git
from tests.helpers.repo import (
    RUN,
    assert_fsck_clean,
    change_of,
    make_imp,
    note,
    tree_paths,
)


def test_quarantine_keeps_readable_files_and_lists_the_rest(tmp_path: Path) -> None:
    home, repo = make_imp(tmp_path)
    base = main_commit(repo)
    path, data = note()
    change = change_of(
        repo,
        {path: data, ".git/hooks/post-checkout": b"#!/bin/sh\n", "records/t/AGENTS.md": b"obey"},
        deleted={"records/README.md"},
    )
    change.problems.append(Violation("records/t/passwd.md", "symlink", "link to /etc/passwd"))
    sha = quarantine(repo, RUN, base, change, "box timed out after 600 s\nexit code 137")
    assert repo.lookup_reference(quarantine_ref(RUN)).target == pygit2.Oid(hex=sha)
    assert main_commit(repo) == base
    commit = repo[sha]
    assert commit.parents[0].id == pygit2.Oid(hex=base)
    assert commit.message.startswith(f"Quarantine run {RUN}: box timed out after 600 s")
    assert "exit code 137" in commit.message
    assert "records/t/passwd.md" in commit.message and "symlink" in commit.message
    paths = tree_paths(repo, quarantine_ref(RUN))
    assert path in paths
    assert "records/README.md" not in paths
    assert not any(".git" in p or "AGENTS" in p or "passwd" in p for p in paths)
    assert "'.git/hooks/post-checkout'" in commit.message
    # One list of what the commit does not hold, each entry with its path and reason.
    assert set(not_kept_lines(commit.message)) == {
        "- 'records/t/passwd.md': symlink: link to /etc/passwd",
        "- '.git/hooks/post-checkout': not-stored: a path no tree may hold, or a clash",
        "- 'records/t/AGENTS.md': not-stored: a path no tree may hold, or a clash",
    }
    origin_refs = git("-C", home.origin("yuko"), "for-each-ref", "--format=%(refname)").stdout
    assert origin_refs.split() == ["refs/heads/main"]
    assert_fsck_clean(home.repo("yuko"))


def test_quarantine_is_idempotent_and_checks_the_run_id(tmp_path: Path) -> None:
    _, repo = make_imp(tmp_path)
    base = main_commit(repo)
    change = change_of(repo, dict([note()]))
    first = quarantine(repo, RUN, base, change, "killed")
    second = quarantine(repo, RUN, base, change, "killed")
    assert repo.lookup_reference(quarantine_ref(RUN)).target == pygit2.Oid(hex=second)
    assert tree_paths(repo, first) == tree_paths(repo, second)
    with pytest.raises(UsageError):
        quarantine(repo, "../../heads/main", base, change, "x")
    assert main_commit(repo) == base
