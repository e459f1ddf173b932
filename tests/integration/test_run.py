"""`impyard run` end to end against the real engine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.cli import Cli, json_lines
from tests.helpers.git import GIT_ENV, git
from tests.helpers.policy import edit_org
from tests.helpers.runs import allocated_bytes
from tests.helpers.runtime import TEST_RUNTIME

pytestmark = pytest.mark.docker

NOTE = 'printf "body\\n" | impyard-note vendors acme-sso --source https://example.com/report'


def repo_of(cli: Cli, imp: str = "yuko") -> Path:
    result = cli("knowledge", imp)
    assert result.code == 0, result.stderr
    return Path(result.stdout.strip())


def head(repo: Path) -> str:
    return git("-C", repo, "rev-parse", "main").stdout.strip()


def run_json(cli: Cli, *args: str, timeout: float = 120) -> tuple[int, dict[str, Any]]:
    result = cli("run", "yuko", "--prompt", "research acme", "--json", *args, timeout=timeout)
    assert "Traceback" not in result.stderr, result.stderr
    return result.code, json.loads(result.stdout)


def assert_fsck_clean(repo: Path) -> None:
    fsck = git("-C", repo, "fsck", "--strict", check=False)
    assert fsck.returncode == 0, fsck.stdout + fsck.stderr


def test_clean_run_lands_one_note_with_trusted_trailers(yuko: Cli) -> None:
    repo = repo_of(yuko)
    before = head(repo)
    code, record = run_json(yuko, "--command", NOTE)
    assert code == 0, record
    assert record["checkpoint"] == "integrated"
    assert record["base_commit"] == before
    assert record["produced_commit"] == head(repo)
    namespace = record["namespace"]
    files = git("-C", repo, "ls-tree", "-r", "--name-only", "main").stdout.split()
    assert f"records/vendors/acme-sso--{namespace}_1.md" in files
    message = git("-C", repo, "log", "-1", "--format=%B", "main").stdout
    assert f"Impyard-Run: {record['run_id']}" in message
    assert "Impyard-Imp: yuko" in message
    assert f"Impyard-Base: {before}" in message
    assert "Impyard-Mode: append" in message
    assert f"Impyard-Runtime: {TEST_RUNTIME}" in message
    assert git("-C", repo, "log", "-1", "--format=%an", "main").stdout.strip() == "yuko"
    assert_fsck_clean(repo)
    shown = yuko("runs", "show", str(record["run_id"]))
    assert shown.code == 0 and "integrated" in shown.stdout and namespace in shown.stdout
    assert f"runtime           {TEST_RUNTIME}" in shown.stdout
    listed = json.loads(yuko("runs", "list", "--json").stdout)
    assert [r["run_id"] for r in listed] == [record["run_id"]]
    events = [e["event"] for e in json_lines(yuko("journal", "--json").stdout)]
    for expected in ("run.created", "box.started", "box.exited", "knowledge.integrated"):
        assert expected in events
    # Integrated runs drop their checkout; the commit keeps the change.
    run_dir = yuko.home / "runs" / str(record["run_id"])
    assert not (run_dir / "space").exists() and not (run_dir / "space.img").exists()


def test_run_without_changes_is_empty(yuko: Cli) -> None:
    repo = repo_of(yuko)
    before = head(repo)
    code, record = run_json(yuko, "--command", "true")
    assert (code, record["checkpoint"], head(repo)) == (0, "empty", before)


def test_failing_box_is_quarantined_and_main_untouched(yuko: Cli) -> None:
    repo = repo_of(yuko)
    before = head(repo)
    code, record = run_json(yuko, "--command", f"{NOTE} >/dev/null; echo half-done >&2; exit 1")
    assert code == 4
    assert record["checkpoint"] == "quarantined"
    assert record["exit_code"] == 1
    assert head(repo) == before
    ref = f"refs/quarantine/{record['run_id']}"
    quarantined = git("-C", repo, "ls-tree", "-r", "--name-only", ref).stdout
    assert f"acme-sso--{record['namespace']}_1.md" in quarantined
    # The checkout is kept: its loop space as an unmounted image (which frees the device).
    run_dir = yuko.home / "runs" / str(record["run_id"])
    assert (run_dir / "space.img").is_file() and not os.path.ismount(run_dir / "space")
    logs = yuko("runs", "logs", str(record["run_id"]))
    assert "half-done" in logs.stdout
    assert_fsck_clean(repo)


def test_timeout_kills_and_quarantines(yuko: Cli) -> None:
    repo = repo_of(yuko)
    before = head(repo)
    code, record = run_json(yuko, "--timeout", "1", "--command", "sleep 60")
    assert code == 4
    assert record["timed_out"] is True
    assert record["checkpoint"] == "quarantined"
    assert head(repo) == before


def test_an_oom_kill_from_filling_tmp_says_so(yuko: Cli) -> None:
    """/tmp is memory: a box that fills it past its memory limit is OOM-killed, and the run
    says that /tmp was the cause instead of a bare "out of memory"."""
    edit_org(yuko.home, "memory_bytes = 3221225472", "memory_bytes = 268435456")
    assert yuko("deploy").code == 0
    code, record = run_json(
        yuko, "--command", "dd if=/dev/zero of=/tmp/fill bs=1048576 count=1024; sleep 1; exit 0"
    )
    assert code == 4
    assert record["oom_killed"] is True
    assert record["checkpoint"] == "quarantined"
    reason = str(record["reason"])
    assert "of the 0.25 GiB memory limit" in reason
    shown = yuko("runs", "show", str(record["run_id"]))
    if TEST_RUNTIME == "runsc":
        # gVisor keeps /tmp in the sandbox's memory: the host sees one figure for the box.
        assert reason.startswith("killed by the out-of-memory killer: the box held"), reason
        assert "under gVisor /tmp's files and the processes' memory are one figure" in reason
        assert record["oom_tmp_bytes"] is None
        assert "the box held" in shown.stdout
        return
    assert reason.startswith("killed by the out-of-memory killer: files in /tmp held"), reason
    assert record["oom_tmp_bytes"] >= 128 * 2**20
    assert "files in /tmp held" in shown.stdout


@pytest.mark.parametrize(
    ("command", "rule"),
    [
        ('mkdir -p "$K/records/t" && ln -s /etc/passwd "$K/records/t/x--${NS}_1.md"', "symlink"),
        (
            'mkdir -p "$K/organization" && echo index > "$K/organization/index.md"',
            "organization-in-append",
        ),
        ('echo changed >> "$K/README.md"', "protected-path"),
    ],
)
def test_box_output_breaking_rules_is_rejected_with_reasons(
    yuko: Cli, command: str, rule: str
) -> None:
    repo = repo_of(yuko)
    before = head(repo)
    script = f"K=$IMPYARD_KNOWLEDGE_DIR NS=$IMPYARD_KNOWLEDGE_NAMESPACE; {command}"
    code, record = run_json(yuko, "--command", script)
    assert code == 3, record
    assert record["checkpoint"] == "rejected"
    assert rule in {e["rule"] for e in record["validation_errors"]}
    assert head(repo) == before
    assert (
        git("-C", repo, "rev-parse", "--verify", f"refs/candidates/{record['run_id']}").returncode
        == 0
    )
    shown = yuko("runs", "show", str(record["run_id"]))
    assert rule in shown.stdout


def test_modifying_an_existing_record_is_rejected(yuko: Cli) -> None:
    code, first = run_json(yuko, "--command", NOTE)
    assert code == 0
    path = f"records/vendors/acme-sso--{first['namespace']}_1.md"
    code, second = run_json(yuko, "--command", f'echo more >> "$IMPYARD_KNOWLEDGE_DIR/{path}"')
    assert code == 3
    reasons = {(e["path"], e["rule"]) for e in second["validation_errors"]}
    assert (path, "modified-existing") in reasons


def test_reorganize_run_rebuilds_organization(yuko: Cli) -> None:
    repo = repo_of(yuko)
    assert run_json(yuko, "--command", NOTE)[0] == 0
    code, record = run_json(yuko, "--reorganize", "--command", "imp")
    assert code == 0, record
    assert record["mode"] == "reorganize"
    index = git("-C", repo, "show", "main:organization/index.md").stdout
    assert "acme-sso" in index
    assert "Impyard-Mode: reorganize" in git("-C", repo, "log", "-1", "--format=%B").stdout
    events = json_lines(yuko("journal", "--run", str(record["run_id"]), "--json").stdout)
    names = [e["event"] for e in events]
    assert names.index("lease.acquired") < names.index("box.started")
    assert "lease.released" in names


def test_two_reorganize_runs_never_overlap(yuko: Cli) -> None:
    env = {**GIT_ENV}
    cmd = [
        sys.executable,
        "-m",
        "impyard",
        "--home",
        str(yuko.home),
        "run",
        "yuko",
        "--prompt",
        "reorganize",
        "--reorganize",
        "--json",
        "--command",
        "sleep 3; imp",
    ]
    first = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**dict(__import__("os").environ), **env},
    )
    try:
        # Wait until the first holds the lease (its box has started).
        import time

        for _ in range(100):
            journal = yuko.home / "journal.jsonl"
            if journal.exists() and "box.started" in journal.read_text():
                break
            time.sleep(0.1)
        second = yuko("run", "yuko", "--prompt", "again", "--reorganize", "--command", "imp")
        assert second.code != 0
        assert "lease" in second.stderr and "held by run" in second.stderr
        assert "Traceback" not in second.stderr
    finally:
        out, err = first.communicate(timeout=120)
    assert first.returncode == 0, err
    assert json.loads(out)["checkpoint"] == "integrated"


def test_box_sees_only_its_contract(yuko: Cli) -> None:
    sections = {
        "tmp": "grep ' /tmp ' /proc/mounts",
        "tmpmode": "stat -c %a /tmp",
        "tmpdir": 'echo "$TMPDIR"',
        "origin": "touch /opt/impyard/origin.git/x 2>/dev/null && echo writable || echo ro",
        "root": "touch /rootfs-probe 2>/dev/null && echo writable || echo ro",
        "checkout": 'ls -a "$IMPYARD_KNOWLEDGE_DIR"',
        "scratch": "test -e /opt/impyard/scratch && echo exists || echo absent",
        "caps": "grep CapEff /proc/self/status",
        "uid": "id -u",
        "mounts": "cat /proc/self/mountinfo",
        "env": "env",
    }
    probe = "; ".join(f"echo '=={name}'; {cmd}" for name, cmd in sections.items())
    code, record = run_json(yuko, "--command", probe)
    assert code == 0, record
    out = yuko("runs", "logs", str(record["run_id"])).stdout
    seen = dict(part.split("\n", 1) for part in out.split("==")[1:])
    assert "tmpfs" in seen["tmp"]
    # gVisor's /proc/mounts lists neither nosuid nor nodev (check box tries what they stop).
    wanted = (
        ["size=2147483648"] if TEST_RUNTIME == "runsc" else ["nosuid", "nodev", "size=2097152k"]
    )
    for option in wanted:
        assert option in seen["tmp"].split()[3].split(",")
    assert seen["tmpmode"].strip() == "1777"
    assert seen["tmpdir"].strip() == "/tmp"
    assert seen["origin"].strip() == "ro"
    assert seen["root"].strip() == "ro"
    assert ".git" not in seen["checkout"].split()
    assert {"records", "organization", "README.md"} <= set(seen["checkout"].split())
    assert seen["scratch"].strip() == "absent"
    assert seen["caps"].split() == ["CapEff:", "0000000000000000"]
    assert seen["uid"].strip() == "65532"
    assert "repo.git" not in out, "the canonical repository must never reach the box"
    assert str(yuko.home) not in seen["env"]


def test_tightened_imp_limit_rejects_a_note_other_imps_may_write(yuko: Cli) -> None:
    assert yuko("imp", "create", "kai").code == 0
    overlay = yuko.home / "policy" / "imps" / "yuko.toml"
    overlay.write_text("[knowledge]\nmax_file_chars = 300\n")
    deployed = yuko("deploy")
    assert deployed.code == 0, deployed.stderr
    long_note = 'head -c 600 /dev/zero | tr "\\0" "a" | impyard-note vendors long'
    yuko_run = yuko("run", "yuko", "--prompt", "p", "--json", "--command", long_note)
    kai_run = yuko("run", "kai", "--prompt", "p", "--json", "--command", long_note)
    assert yuko_run.code == 3, yuko_run.stdout + yuko_run.stderr
    rules = {e["rule"] for e in json.loads(yuko_run.stdout)["validation_errors"]}
    assert rules == {"file-too-large"}
    assert kai_run.code == 0, kai_run.stdout + kai_run.stderr
    assert json.loads(kai_run.stdout)["checkpoint"] == "integrated"


@pytest.mark.parametrize(
    "where", [("run", "yuko", "--prompt", "p"), ("task", "add", "yuko", "--prompt", "p")]
)
@pytest.mark.parametrize("channel", ["a\nb", " padded", "tab\there", ""])
def test_a_channel_that_cannot_be_a_trailer_is_refused_before_any_box(
    yuko: Cli, where: tuple[str, ...], channel: str
) -> None:
    result = yuko(*where, "--channel", channel)
    assert result.code == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("impyard: error: channel"), result.stderr
    assert json.loads(yuko("runs", "list", "--json").stdout) == []
    assert json.loads(yuko("task", "list", "--json").stdout) == []


def test_a_flood_of_violations_is_stored_as_the_first_hundred_and_counts(yuko: Cli) -> None:
    flood = (
        'mkdir -p "$K/organization" && cd "$K/organization" && i=0; '
        'while [ $i -lt 3000 ]; do : > "f$i.md"; i=$((i+1)); done'
    )
    code, record = run_json(yuko, "--command", f"K=$IMPYARD_KNOWLEDGE_DIR; {flood}")
    assert code == 3
    assert record["checkpoint"] == "rejected"
    assert len(record["validation_errors"]) == 100
    assert record["validation_errors_total"] == 3000
    assert record["validation_error_counts"] == {"organization-in-append": 3000}
    run_dir = yuko.home / "runs" / str(record["run_id"])
    assert (run_dir / "manifest.json").stat().st_size < 64 * 1024
    journal = (yuko.home / "journal.jsonl").read_text().splitlines()
    assert max(len(line) for line in journal) < 64 * 1024
    rejected = [json.loads(line) for line in journal if '"knowledge.rejected"' in line]
    assert rejected[0]["violations_total"] == 3000
    message = git("-C", repo_of(yuko), "log", "-1", "--format=%B", str(record["candidate_ref"]))
    assert "and 2900 more (3000 in all: organization-in-append 3000)" in message.stdout
    assert len(message.stdout.splitlines()) < 150


def test_a_box_nesting_1500_directories_is_rejected_and_cleaned_up(yuko: Cli) -> None:
    deep = (
        'd="$IMPYARD_KNOWLEDGE_DIR/records/deep"; i=0; '
        'while [ $i -lt 1500 ]; do d="$d/d"; i=$((i+1)); done; mkdir -p "$d"'
    )
    code, record = run_json(yuko, "--command", deep)
    assert code == 3, record
    assert record["checkpoint"] == "rejected"
    assert "too-deep" in {e["rule"] for e in record["validation_errors"]}
    run_dir = yuko.home / "runs" / str(record["run_id"])
    assert not (run_dir / "space").exists() and not (run_dir / "space.img").exists()
    served = yuko("serve", "--once")  # recovery's sweep walks nothing it cannot finish
    assert served.code == 0, served.stderr
    assert_fsck_clean(repo_of(yuko))


def test_a_box_that_writes_past_its_space_is_quarantined_and_the_disk_keeps_its_room(
    yuko: Cli,
) -> None:
    """The run's writable space is a filesystem sized from max_repo_bytes: a box writing
    500 MB with a 10 MB limit hits ENOSPC in the box, not the host's data root."""
    edit_org(yuko.home, "max_repo_bytes = 1000000000", "max_repo_bytes = 10000000")
    assert yuko("deploy").code == 0
    fill = 'dd if=/dev/zero of="$IMPYARD_KNOWLEDGE_DIR/records/fill" bs=1048576 count=500'
    code, record = run_json(yuko, "--command", fill)
    assert code == 4, record
    assert record["checkpoint"] == "quarantined"
    reason = str(record["reason"])
    assert reason.startswith("exited with status 1; the run's writable space"), reason
    assert reason.endswith("is full"), reason
    # What the data root holds on disk, not the disk's free space: other work (another
    # test, a bench) may write to the same disk meanwhile.
    assert allocated_bytes(yuko.home) < 100 * 2**20
    assert "No space left on device" in yuko("runs", "logs", str(record["run_id"])).stdout


def test_a_run_that_would_eat_the_reserve_is_not_admitted(yuko: Cli) -> None:
    huge = {"IMPYARD_DISK_RESERVE_BYTES": str(2**60)}
    result = yuko("run", "yuko", "--prompt", "p", "--command", "true", env=huge)
    assert result.code == 1, result.stderr
    line = result.stderr.strip()
    assert line.startswith("impyard: error: the data root") and "reserve" in line
    assert "Traceback" not in result.stderr
    assert json.loads(yuko("runs", "list", "--json").stdout) == []
    assert yuko("task", "add", "yuko", "--prompt", "later").code == 0
    served = yuko("serve", "--once", env=huge)
    assert served.code == 0, served.stderr
    assert "waiting: disk space" in served.stdout
    (task,) = json.loads(yuko("task", "list", "--json").stdout)
    assert task["state"] == "queued"
    assert json.loads(yuko("runs", "list", "--json").stdout) == []


def test_knowledge_disabled_by_policy_mounts_and_integrates_nothing(yuko: Cli) -> None:
    overlay = yuko.home / "policy" / "imps" / "yuko.toml"
    overlay.write_text("[knowledge]\nenabled = false\n")
    assert yuko("deploy").code == 0
    before = head(repo_of(yuko))
    probe = (
        "if [ -e /opt/impyard/knowledge ]; then echo knowledge=mounted; "
        'else echo knowledge=absent; fi; echo "dir=${IMPYARD_KNOWLEDGE_DIR:-unset}"'
    )
    code, record = run_json(yuko, "--command", probe)
    assert code == 0, record
    assert record["checkpoint"] == "empty"
    assert "knowledge is disabled by policy" in str(record["reason"])
    assert record["produced_commit"] is None and record["space"] is None
    logs = yuko("runs", "logs", str(record["run_id"])).stdout
    assert "knowledge=absent" in logs and "dir=unset" in logs
    assert head(repo_of(yuko)) == before
    shown = yuko("runs", "show", str(record["run_id"]))
    assert "knowledge is disabled by policy" in shown.stdout


def test_a_clean_exit_seen_by_containerd_keeps_all_output_and_a_failing_one_waits(
    yuko: Cli,
) -> None:
    # containerd reports a clean exit before the engine has closed the box's streams:
    # the run goes on at once, yet its log still holds every byte the box printed.
    lines = 20000
    code, record = run_json(yuko, "--command", f"seq 1 {lines}; {NOTE}")
    assert code == 0, record
    assert record["checkpoint"] == "integrated"
    logs = yuko("runs", "logs", str(record["run_id"]), "--raw").stdout.splitlines()
    assert [str(n) for n in range(1, lines + 1)] == logs[:lines]
    exited = [e for e in json_lines(yuko("journal", "--json").stdout) if e["event"] == "box.exited"]
    assert exited[-1]["seen_by"] == "containerd"
    # Any other end is the engine's to report, with its status.
    code, record = run_json(yuko, "--command", "echo bye; exit 3")
    assert record["checkpoint"] == "quarantined"
    assert "status 3" in record["reason"]
    exited = [e for e in json_lines(yuko("journal", "--json").stdout) if e["event"] == "box.exited"]
    assert (exited[-1]["exit_code"], exited[-1]["seen_by"]) == (3, "engine")
    assert "bye" in yuko("runs", "logs", str(record["run_id"])).stdout
