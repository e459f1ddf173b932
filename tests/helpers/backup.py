"""Backup remotes for tests: configuring them, landing notes, comparing refs."""

from __future__ import annotations

import json
import re
from pathlib import Path

from impyard.home import Home
from impyard.knowledge.change import KnowledgeLimits
from impyard.knowledge.imps import open_repo
from impyard.knowledge.integration.lane import LaneResult, integrate
from impyard.knowledge.store.repo import main_commit
from impyard.policy.compile import deploy
from tests.helpers.git import git
from tests.helpers.policy import edit_org
from tests.helpers.repo import change_of, namespace, note_path, note_text, run_id, trailers


def set_remotes(home: Home, remotes: list[str]) -> None:
    """Point ``[backup] remotes`` at ``remotes`` and deploy, as an owner would."""
    org = home.org_policy.read_text()
    current = re.search(r"^\[backup\]\nremotes = .*$", org, re.MULTILINE)
    assert current is not None, "org.toml has no [backup] remotes line"
    edit_org(home.root, current[0], f"[backup]\nremotes = {json.dumps(remotes)}")
    deploy(home)


def land_note(home: Home, n: int, imp: str = "yuko") -> LaneResult:
    """Integrate one note of run ``n`` onto the current main through the real lane."""
    repo = open_repo(home, imp)
    base = main_commit(repo)
    ns = namespace(n)
    change = change_of(repo, {note_path(ns, 1): note_text(f"{ns}_1").encode()})
    result = integrate(
        home,
        imp,
        change,
        base=base,
        namespace=ns,
        mode="append",
        limits=KnowledgeLimits(),
        trailers=trailers(base, run=run_id(n), imp=imp),
    )
    assert result.checkpoint == "integrated", result
    return result


def reject_note(home: Home, n: int, imp: str = "yuko") -> str:
    """A run whose change the lane refuses: it stays at refs/candidates/<run-id>."""
    repo = open_repo(home, imp)
    base = main_commit(repo)
    change = change_of(repo, {"README.md": b"mine\n"})
    result = integrate(
        home,
        imp,
        change,
        base=base,
        namespace=namespace(n),
        mode="append",
        limits=KnowledgeLimits(),
        trailers=trailers(base, run=run_id(n), imp=imp),
    )
    assert result.candidate_ref is not None, result
    return result.candidate_ref


def refs(git_dir: Path | str, *patterns: str) -> dict[str, str]:
    """``git for-each-ref`` of a repository: ref name -> object id."""
    out = git("-C", git_dir, "for-each-ref", "--format=%(refname) %(objectname)", *patterns)
    return dict(line.split(" ", 1) for line in out.stdout.splitlines())


BACKED_UP = ("refs/heads/", "refs/candidates/", "refs/quarantine/")


def backed_up(git_dir: Path | str) -> dict[str, str]:
    return refs(git_dir, *BACKED_UP)
