"""A rejected run's candidate keeps every file a retry could land, and lists what it could
not keep; a retry after raising the limit lands it (real engine, real CLI)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.cli import Cli
from tests.helpers.git import git
from tests.helpers.runtime import TEST_RUNTIME

pytestmark = pytest.mark.docker

# 300 bytes of body under a limit of 60 characters (240 bytes).
LONG_NOTE = 'head -c 300 /dev/zero | tr "\\0" "a" | impyard-note vendors long >/dev/null'
LINK_AND_FIFO = (
    'K=$IMPYARD_KNOWLEDGE_DIR; mkdir -p "$K/records/t" && '
    'ln -s /etc/passwd "$K/records/t/link.md" && mkfifo "$K/records/t/pipe.md"'
)


@pytest.fixture
def yard(cli: Cli) -> Cli:
    assert cli("init").code == 0
    created = cli("imp", "create", "yuko")
    assert created.code == 0, created.stderr
    limit(cli, 60)
    return cli


def limit(cli: Cli, chars: int) -> None:
    overlay = cli.home / "policy" / "imps" / "yuko.toml"
    overlay.write_text(f"[knowledge]\nmax_file_chars = {chars}\n")
    deployed = cli("deploy")
    assert deployed.code == 0, deployed.stdout + deployed.stderr


def rejected_run(cli: Cli, script: str) -> dict[str, Any]:
    result = cli("run", "yuko", "--prompt", "p", "--json", "--command", script, timeout=120)
    assert result.code == 3, result.stdout + result.stderr
    record: dict[str, Any] = json.loads(result.stdout)
    assert record["checkpoint"] == "rejected"
    return record


def refs(cli: Cli) -> str:
    repo = Path(cli("knowledge", "yuko").stdout.strip())
    return git("-C", repo, "for-each-ref", "--format=%(refname) %(objectname)").stdout


def main_files(cli: Cli) -> set[str]:
    repo = Path(cli("knowledge", "yuko").stdout.strip())
    return set(git("-C", repo, "ls-tree", "-r", "--name-only", "main").stdout.split())


def test_a_note_refused_for_its_size_is_kept_and_lands_after_the_limit_is_raised(
    yard: Cli,
) -> None:
    record = rejected_run(yard, LONG_NOTE)
    run_id = record["run_id"]
    [refused] = record["validation_errors"]
    assert refused["rule"] == "file-too-large"
    path = refused["path"]

    shown = json.loads(yard("candidates", "show", run_id, "--json").stdout)
    assert [f["path"] for f in shown["files"]] == [path]
    assert shown["files"][0]["size"] > 240
    assert shown["not_kept"] == []

    # Retrying under the same policy refuses it again and says what retry is for.
    again = yard("candidates", "retry", run_id)
    assert again.code == 3, again.stdout + again.stderr
    assert "only helps after a policy change" in again.stdout
    assert f"refs/candidates/{run_id}" in refs(yard)

    limit(yard, 1000)
    landed = yard("candidates", "retry", run_id, "--json")
    assert landed.code == 0, landed.stdout + landed.stderr
    assert json.loads(landed.stdout)["outcome"] == "integrated"
    assert path in main_files(yard)
    assert f"refs/candidates/{run_id}" not in refs(yard)


def test_links_and_fifos_are_listed_as_not_kept_and_nothing_to_land_keeps_the_ref(
    yard: Cli,
) -> None:
    record = rejected_run(yard, LINK_AND_FIFO)
    run_id = record["run_id"]
    shown = yard("candidates", "show", run_id, "--json")
    assert shown.code == 0, shown.stderr
    not_kept = json.loads(shown.stdout)["not_kept"]
    assert any("'records/t/link.md': symlink" in line for line in not_kept), not_kept
    text = yard("candidates", "show", run_id).stdout
    if TEST_RUNTIME == "runsc":
        # gVisor keeps a fifo made in a bind mount inside the sandbox: the host's snapshot
        # never sees it, so only the link is left out.
        assert "not kept (1):" in text, text
    else:
        assert any("'records/t/pipe.md': special-file" in line for line in not_kept), not_kept
        assert "not kept (2):" in text, text

    before = refs(yard)
    retried = yard("candidates", "retry", run_id)
    assert retried.code == 1, retried.stdout + retried.stderr
    [line] = retried.stderr.splitlines()
    assert "nothing to land" in line and f"refs/candidates/{run_id}" in line
    assert refs(yard) == before


def test_a_candidate_keeps_files_over_the_limit_only_up_to_its_bound(yard: Cli) -> None:
    overlay = yard.home / "policy" / "imps" / "yuko.toml"
    overlay.write_text("[knowledge]\nmax_file_chars = 60\ncandidate_max_bytes = 1000\n")
    assert yard("deploy").code == 0
    three = " && ".join(
        f'head -c 600 /dev/zero | tr "\\0" "a" > "$K/records/t/big-{n}.md"' for n in range(3)
    )
    record = rejected_run(yard, f'K=$IMPYARD_KNOWLEDGE_DIR; mkdir -p "$K/records/t" && {three}')
    shown = json.loads(yard("candidates", "show", record["run_id"], "--json").stdout)
    # 600 bytes fit in the 1000-byte bound once; the other two are listed, never read.
    kept = [f["path"] for f in shown["files"]]
    assert len(kept) == 1 and shown["files"][0]["size"] == 600
    assert len(shown["not_kept"]) == 2
    for line in shown["not_kept"]:
        assert "file-too-large" in line and "candidate_max_bytes" in line, line
        assert not any(path in line for path in kept)
