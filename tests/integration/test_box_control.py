"""The box asks its own gateway: ``impyard-check`` and ``impyard-checkpoint`` from inside
running boxes, against the real engine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pygit2
import pytest

from impyard.journal.log import Journal
from tests.helpers.cli import Cli
from tests.helpers.git import GIT_ENV, git
from tests.helpers.repo import assert_fsck_clean
from tests.helpers.runtime import TEST_RUNTIME

pytestmark = pytest.mark.docker

KDIR = '"$IMPYARD_KNOWLEDGE_DIR"'


def note(topic: str, slug: str, body: str) -> str:
    return f'printf "{body}\\n" | impyard-note {topic} {slug} >/dev/null'


#: Note facts/one of :func:`checkpoint_one_then` inside the box, by the run's namespace.
NOTE_ONE = f"{KDIR}/records/facts/one--${{NS}}_1.md"


def checkpoint_one_then(claim: str, *then: str) -> str:
    """A box script that notes facts/one saying ``claim``, lands it with
    ``impyard-checkpoint``, then runs each of ``then`` (which may name it as
    :data:`NOTE_ONE`)."""
    return "; ".join(
        [
            "NS=$IMPYARD_KNOWLEDGE_NAMESPACE",
            note("facts", "one", claim),
            "impyard-checkpoint",
            *then,
        ]
    )


def repo_of(cli: Cli) -> Path:
    return Path(cli("knowledge", "yuko").stdout.strip())


def run(cli: Cli, script: str, *args: str, timeout: float = 120) -> tuple[int, dict[str, Any]]:
    result = cli(
        "run", "yuko", "--prompt", "p", "--json", "--command", script, *args, timeout=timeout
    )
    assert "Traceback" not in result.stderr, result.stderr
    return result.code, json.loads(result.stdout)


def box_log(cli: Cli, run_id: str) -> str:
    return cli("runs", "logs", run_id).stdout


def main_files(repo: Path, rev: str = "main") -> set[str]:
    return set(git("-C", repo, "ls-tree", "-r", "--name-only", rev).stdout.split())


def checkpoint_trailers(repo: Path, run_id: str) -> list[str]:
    """``Impyard-Checkpoint`` of the run's commits on main, oldest first."""
    git_repo = pygit2.Repository(str(repo))
    walker = git_repo.walk(git_repo.references["refs/heads/main"].target)
    walker.simplify_first_parent()
    found = [
        commit.message_trailers.get("Impyard-Checkpoint", "")
        for commit in walker
        if commit.message_trailers.get("Impyard-Run") == run_id
    ]
    return found[::-1]


def repo_state(repo: Path) -> tuple[str, str]:
    refs = git("-C", repo, "for-each-ref", "--format=%(refname) %(objectname)").stdout
    objects = git("-C", repo, "count-objects", "-v").stdout
    return refs, objects


def start(cli: Cli, script: str, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, **GIT_ENV}
    env.pop("IMPYARD_HOME", None)
    argv = ["--home", str(cli.home), "run", "yuko", "--prompt", "p", "--json", *args]
    return subprocess.Popen(
        [sys.executable, "-m", "impyard", *argv, "--command", script],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def finished(proc: subprocess.Popen[str]) -> dict[str, Any]:
    out, err = proc.communicate(timeout=180)
    assert "Traceback" not in err, err
    record: dict[str, Any] = json.loads(out)
    return record


def test_check_reports_each_violation_kind_from_a_running_box_and_writes_nothing(
    yuko: Cli,
) -> None:
    code, first = run(yuko, note("facts", "base", "an existing record"))
    assert code == 0, first
    existing = f"records/facts/base--{first['namespace']}_1.md"
    repo = repo_of(yuko)
    before = repo_state(repo)
    deep = "/".join(["d"] * 70)
    bad = f"""
set -u
cd {KDIR}
ns=$IMPYARD_KNOWLEDGE_NAMESPACE
cp {existing} /tmp/existing.md && cp README.md /tmp/README.md
printf 'changed\\n' >> {existing}
mkdir -p records/t organization .hidden
printf 'no frontmatter\\n' > records/t/plain--${{ns}}_1.md
printf -- '---\\nid: n_000000000000_1\\ncreated_at: 2026-07-11T12:00:00Z\\n---\\nx\\n' \\
    > records/t/other--n_000000000000_1.md
printf 'x\\n' > records/t/wrongname.md
printf 'index\\n' > organization/index.md
printf 'x\\n' > README.md
printf 'x\\n' > .hidden/x.md
printf 'x\\n' > records/t/AGENTS.md
printf 'x\\n' > records/t/exec.md && chmod +x records/t/exec.md
printf 'key AKIAIOSFODNN7EXAMPLE\\n' > records/t/cred.md
printf '\\377\\376\\n' > records/t/binary.md
printf 'x\\n' > 'records/t/con.md'
printf 'x\\n' > records/t/Case.md && printf 'x\\n' > records/t/case.md
ln -s /etc/passwd records/t/link.md
mkfifo records/t/pipe.md
printf 'x\\n' > records/t/a.md && ln records/t/a.md records/t/b.md
mkdir -p records/{deep} && printf 'x\\n' > records/{deep}/x.md
impyard-check > /tmp/check.out; echo "check-status=$?"
cat /tmp/check.out
# Leave nothing behind, so the exit checkpoint writes nothing either.
cat /tmp/existing.md > {existing} && cat /tmp/README.md > README.md
rm -rf records/t records/d organization/index.md .hidden
"""
    code, record = run(yuko, bad)
    assert code == 0, record
    assert record["checkpoint"] == "empty"
    log = box_log(yuko, record["run_id"])
    assert "check-status=1" in log, log
    rules = {
        line.split(": ")[1]
        for line in log.splitlines()
        if line.startswith(("records", "organization", "README", ".hidden", "'", "b'"))
    }
    expected = {
        "modified-existing",
        "frontmatter",
        "namespace",
        "bad-record-name",
        "organization-in-append",
        "protected-path",
        "hidden-path",
        "instruction-file",
        "executable",
        "credential",
        "not-utf8-text",
        "unportable-name",
        "name-clash",
        "symlink",
        "special-file",
        "hard-link",
        "too-deep",
    }
    if TEST_RUNTIME == "runsc":
        # gVisor keeps a fifo made in a bind mount inside the sandbox: the host's snapshot
        # never holds it, so there is nothing special to refuse.
        expected.discard("special-file")
    assert expected <= rules, (expected - rules, log)
    assert "impyard-check: " in log and "violation(s)" in log
    # Nothing reached Git: no ref moved, no object was written, by the check or the exit.
    assert repo_state(repo) == before


def test_two_checkpoints_and_the_exit_land_three_commits_in_order(yuko: Cli) -> None:
    script = "; ".join(
        [
            note("facts", "one", "first"),
            "impyard-checkpoint",
            note("facts", "two", "second"),
            "impyard-checkpoint",
            note("facts", "three", "third"),
        ]
    )
    code, record = run(yuko, script)
    assert code == 0, record
    repo = repo_of(yuko)
    ns = record["namespace"]
    assert checkpoint_trailers(repo, record["run_id"]) == ["1 (mid-run)", "2 (mid-run)", "3 (exit)"]
    commits = git("-C", repo, "rev-list", "--reverse", "main").stdout.split()[1:]
    assert len(commits) == 3
    for sha, slug in zip(commits, ("one", "two", "three"), strict=True):
        changed = git("-C", repo, "diff-tree", "--no-commit-id", "--name-only", "-r", sha).stdout
        assert changed.split() == [f"records/facts/{slug}--{ns}_{commits.index(sha) + 1}.md"]
    assert record["produced_commit"] == commits[-1]
    listed = record["checkpoints"]
    assert [(c["number"], c["state"], c["commit"]) for c in listed] == [
        (1, "integrated", commits[0]),
        (2, "integrated", commits[1]),
    ]
    assert listed[0]["files"] == [f"records/facts/one--{ns}_1.md"] and listed[0]["landed_at"]
    log = box_log(yuko, record["run_id"])
    assert f"impyard-checkpoint: checkpoint 1 landed as {commits[0]} (1 file(s))" in log
    shown = yuko("runs", "show", record["run_id"]).stdout
    assert "mid-run checkpoints:" in shown and commits[1] in shown
    assert_fsck_clean(repo)


def test_a_checkpointed_note_changed_later_is_refused_at_exit_while_the_rest_lands(
    yuko: Cli,
) -> None:
    script = checkpoint_one_then(
        "the original claim",
        f"printf 'edited afterwards\\n' >> {NOTE_ONE}",
        note("facts", "two", "a new fact"),
    )
    code, record = run(yuko, script)
    assert code == 0, record
    ns = record["namespace"]
    one, two = f"records/facts/one--{ns}_1.md", f"records/facts/two--{ns}_2.md"
    assert record["checkpoint"] == "integrated"
    assert [(e["path"], e["rule"]) for e in record["validation_errors"]] == [(one, "checkpointed")]
    repo = repo_of(yuko)
    assert {one, two} <= main_files(repo)
    landed = git("-C", repo, "show", f"main:{one}").stdout
    assert "the original claim" in landed and "edited afterwards" not in landed
    assert checkpoint_trailers(repo, record["run_id"]) == ["1 (mid-run)", "2 (exit)"]
    # The refused edit is kept for the owner.
    assert record["candidate_ref"] == f"refs/candidates/{record['run_id']}"
    kept = git("-C", repo, "show", f"{record['candidate_ref']}:{one}").stdout
    assert "edited afterwards" in kept


def test_a_checkpointed_note_deleted_later_stays_on_main_and_the_deletion_is_kept(
    yuko: Cli,
) -> None:
    script = checkpoint_one_then(
        "the original claim", f"rm {NOTE_ONE}", note("facts", "two", "a new fact")
    )
    code, record = run(yuko, script)
    assert code == 0, record
    ns, run_id = record["namespace"], record["run_id"]
    one, two = f"records/facts/one--{ns}_1.md", f"records/facts/two--{ns}_2.md"
    assert record["checkpoint"] == "integrated"
    assert [(e["path"], e["rule"]) for e in record["validation_errors"]] == [(one, "checkpointed")]
    repo = repo_of(yuko)
    assert {one, two} <= main_files(repo)  # main keeps what landed, and the rest went on
    # The refused state is kept as the box left it: its final tree, without note one.
    assert record["candidate_ref"] == f"refs/candidates/{run_id}"
    kept = main_files(repo, record["candidate_ref"])
    assert two in kept and one not in kept
    differs = git("-C", repo, "diff", "--name-status", "main", record["candidate_ref"]).stdout
    assert differs.splitlines() == [f"D\t{one}"]
    shown = yuko("candidates", "show", run_id, "--json")
    assert shown.code == 0, shown.stderr
    found = json.loads(shown.stdout)
    assert [(v["path"], v["rule"]) for v in found["violations"]] == [(one, "checkpointed")]
    assert (one, "deleted") in [(f["path"], f["status"]) for f in found["files"]]
    assert_fsck_clean(repo)


def test_a_box_killed_after_a_checkpoint_keeps_it_and_quarantines_only_the_rest(
    yuko: Cli,
) -> None:
    script = "; ".join(
        [
            note("facts", "one", "landed"),
            "impyard-checkpoint",
            note("facts", "two", "lost?"),
            "sleep 60",
        ]
    )
    code, record = run(yuko, script, "--timeout", "4")
    assert code == 4, record
    assert record["checkpoint"] == "quarantined" and record["timed_out"]
    ns = record["namespace"]
    one, two = f"records/facts/one--{ns}_1.md", f"records/facts/two--{ns}_2.md"
    repo = repo_of(yuko)
    assert one in main_files(repo) and two not in main_files(repo)
    assert record["produced_commit"] == git("-C", repo, "rev-parse", "main").stdout.strip()
    assert [c["state"] for c in record["checkpoints"]] == ["integrated"]
    quarantined = main_files(repo, record["quarantine_ref"])
    assert two in quarantined and one not in quarantined  # only the rest


def test_a_killed_box_that_deleted_a_checkpointed_note_has_the_deletion_quarantined(
    yuko: Cli,
) -> None:
    script = checkpoint_one_then(
        "landed", f"rm {NOTE_ONE}", note("facts", "two", "lost?"), "sleep 60"
    )
    code, record = run(yuko, script, "--timeout", "4")
    assert code == 4, record
    ns, run_id = record["namespace"], record["run_id"]
    one, two = f"records/facts/one--{ns}_1.md", f"records/facts/two--{ns}_2.md"
    repo = repo_of(yuko)
    assert one in main_files(repo) and two not in main_files(repo)  # what landed stays
    # The quarantine holds the box's final tree and says the landed note went: against
    # main it differs by exactly the deletion and the new note.
    ref = record["quarantine_ref"]
    differs = git(
        "-C", repo, "diff", "--no-renames", "--name-status", "main", ref
    ).stdout.splitlines()
    assert sorted(differs) == sorted([f"D\t{one}", f"A\t{two}"])
    message = git("-C", repo, "log", "-1", "--format=%B", ref).stdout
    assert f"Impyard-Deleted: {one}" in message.splitlines()
    shown = yuko("quarantine", "show", run_id, "--json")
    assert shown.code == 0, shown.stderr
    files = [(f["path"], f["status"]) for f in json.loads(shown.stdout)["files"]]
    assert (one, "deleted") in files and (two, "added") in files
    assert_fsck_clean(repo)


def test_concurrent_runs_of_one_imp_checkpointing_at_once_all_land(yuko: Cli) -> None:
    script = "; ".join(
        [
            note("facts", "a", "first"),
            note("facts", "b", "second"),
            "impyard-checkpoint || exit 9",
            note("facts", "c", "third"),
            "impyard-checkpoint || exit 9",
            note("facts", "d", "fourth"),
        ]
    )
    procs = [start(yuko, script) for _ in range(4)]
    records = [finished(p) for p in procs]
    assert all(r["checkpoint"] == "integrated" for r in records), records
    repo = repo_of(yuko)
    files = main_files(repo)
    for r in records:
        ns = r["namespace"]
        assert {f"records/facts/{s}--{ns}_{n}.md" for n, s in enumerate("abcd", 1)} <= files
        assert checkpoint_trailers(repo, r["run_id"]) == ["1 (mid-run)", "2 (mid-run)", "3 (exit)"]
    assert len(git("-C", repo, "rev-list", "main").stdout.split()) == 1 + 3 * 4
    assert_fsck_clean(repo)


def test_a_box_cannot_checkpoint_on_another_runs_behalf(yuko: Cli) -> None:
    """Each gateway answers for its own run only: a box that names another run (query,
    header, body) checkpoints itself, and never what the other run wrote."""
    other = start(yuko, note("facts", "theirs", "not yours") + "; sleep 6")
    manifests = yuko.home / "runs"
    deadline = time.monotonic() + 60
    victim = None
    while victim is None and time.monotonic() < deadline:
        for path in manifests.glob("run-*/manifest.json"):
            data = json.loads(path.read_text())
            if data["state"] == "running":
                victim = data
        time.sleep(0.1)
    assert victim is not None, "the other run never started"
    forged = json.dumps({"run": victim["run_id"], "imp": "yuko", "namespace": victim["namespace"]})
    claim = f"run={victim['run_id']}&namespace={victim['namespace']}&base={victim['base_commit']}"
    script = "; ".join(
        [
            note("facts", "mine", "my fact"),
            f"wget -q -Y off -O - --header 'X-Impyard-Run: {victim['run_id']}' "
            f"--post-data '{forged}' 'http://127.0.0.1:3128/impyard/checkpoint?{claim}'",
            "exit 3",
        ]
    )
    code, mine = run(yuko, script)
    assert code == 4, mine  # exited 3: the rest is quarantined, the checkpoint stays
    answer = json.loads(
        next(line for line in box_log(yuko, mine["run_id"]).splitlines() if line.startswith("{"))
    )
    theirs = finished(other)
    repo = repo_of(yuko)
    commit = answer["commit"]
    message = git("-C", repo, "log", "-1", "--format=%B", commit).stdout
    assert f"Impyard-Run: {mine['run_id']}" in message
    assert victim["run_id"] not in message
    assert answer["files"] == [f"records/facts/mine--{mine['namespace']}_1.md"]
    assert theirs["checkpoints"] == [] and theirs["checkpoint"] == "integrated"
    assert checkpoint_trailers(repo, theirs["run_id"]) == ["1 (exit)"]


def test_a_reorganize_run_checkpoints_while_it_keeps_the_lease(yuko: Cli) -> None:
    script = "; ".join(
        [
            f"printf '# Index\\n' > {KDIR}/organization/index.md",
            "impyard-checkpoint || exit 9",
            "sleep 4",
            f"printf '# Summary\\n' > {KDIR}/organization/summary.md",
        ]
    )
    proc = start(yuko, script, "--reorganize")
    repo = repo_of(yuko)
    deadline = time.monotonic() + 60
    while "organization/index.md" not in main_files(repo) and time.monotonic() < deadline:
        time.sleep(0.1)
    try:
        # Landed mid-run, and the lease is still this run's: no second reorganizer.
        assert "organization/index.md" in main_files(repo)
        second = yuko("run", "yuko", "--prompt", "again", "--reorganize", "--command", "true")
        assert second.code != 0 and "held by run" in second.stderr
    finally:
        record = finished(proc)
    assert record["checkpoint"] == "integrated" and record["mode"] == "reorganize"
    assert checkpoint_trailers(repo, record["run_id"]) == ["1 (mid-run)", "2 (exit)"]
    assert {"organization/index.md", "organization/summary.md"} <= main_files(repo)
    events = [e["event"] for e in Journal(yuko.home / "journal.jsonl").read(run=record["run_id"])]
    assert events.index("knowledge.checkpointed") < events.index("lease.released")
