"""`impyard serve` against the real engine."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.cli import Cli
from tests.helpers.git import GIT_ENV, git

pytestmark = pytest.mark.docker


def make_yard(cli: Cli, *imps: str, command: str | None = None) -> None:
    assert cli("init").code == 0
    for imp in imps:
        args = ["imp", "create", imp] + (["--command", command] if command else [])
        result = cli(*args)
        assert result.code == 0, result.stderr


def add_task(cli: Cli, imp: str, prompt: str, *extra: str) -> str:
    result = cli("task", "add", imp, "--prompt", prompt, *extra)
    assert result.code == 0, result.stderr
    return result.stdout.strip()


def tasks_json(cli: Cli) -> list[dict[str, Any]]:
    return json.loads(cli("task", "list", "--json").stdout)  # type: ignore[no-any-return]


def repo(cli: Cli, imp: str) -> Path:
    return Path(cli("knowledge", imp).stdout.strip())


def records(cli: Cli, imp: str) -> list[str]:
    out = git("-C", repo(cli, imp), "ls-tree", "-r", "--name-only", "main", "records/").stdout
    return [p for p in out.split() if p.endswith(".md") and "--n_" in p]


def assert_linear_and_clean(path: Path) -> None:
    parents = git("-C", path, "rev-list", "--parents", "main").stdout.splitlines()
    assert all(len(line.split()) <= 2 for line in parents), "main must be linear"
    fsck = git("-C", path, "fsck", "--strict", check=False)
    assert fsck.returncode == 0, fsck.stdout + fsck.stderr


def serve_process(cli: Cli, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    full_env = {**os.environ, **GIT_ENV, **(env or {})}
    return subprocess.Popen(
        [sys.executable, "-m", "impyard", "--home", str(cli.home), "serve", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=full_env,
    )


def running_boxes(cli: Cli, imp_label: str) -> int:
    """Running boxes of ``imp_label`` whose run lives in this test's data root (other tests
    on the same engine may run an imp of the same name at the same time)."""
    import docker

    client = docker.from_env()
    try:
        found = client.api.containers(filters={"label": f"impyard.imp={imp_label}"})
        runs = [c["Labels"].get("impyard.run", "-") for c in found]
        return sum((cli.home / "runs" / run).is_dir() for run in runs)
    finally:
        client.close()


def wait_for(predicate: Any, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError("condition not reached in time")


@pytest.mark.one_runtime
def test_twenty_tasks_for_two_imps_all_land(cli: Cli) -> None:
    make_yard(cli, "ada", "bob")
    for i in range(10):
        add_task(cli, "ada", f"ada fact number {i}")
        add_task(cli, "bob", f"bob fact number {i}")
    result = cli("serve", "--concurrency", "4", "--once", timeout=300)
    assert result.code == 0, result.stderr
    assert "landed 20" in result.stdout, result.stdout[-4000:]
    assert {t["state"] for t in tasks_json(cli)} == {"done"}
    assert {t["checkpoint"] for t in tasks_json(cli)} == {"integrated"}
    for imp in ("ada", "bob"):
        notes = records(cli, imp)
        assert len(notes) == 10 and len(set(notes)) == 10
        path = repo(cli, imp)
        assert int(git("-C", path, "rev-list", "--count", "main").stdout) == 11
        assert_linear_and_clean(path)
        bodies = "".join(git("-C", path, "show", f"main:{n}").stdout for n in notes)
        for i in range(10):
            assert bodies.count(f"{imp} fact number {i}\n") == 1


def test_reorganize_task_behind_held_lease_does_not_block_appends(cli: Cli) -> None:
    make_yard(cli, "ada")
    conn = sqlite3.connect(cli.home / "impyard.db")
    now = time.time()
    conn.execute(
        "INSERT INTO leases (imp, holder, acquired_at, heartbeat_at) VALUES (?, ?, ?, ?)",
        ("ada", "run-elsewhere", now, now + 3600),
    )
    conn.commit()
    conn.close()
    reorganize = add_task(cli, "ada", "rebuild the index", "--reorganize")
    appends = [add_task(cli, "ada", f"append {i}") for i in range(2)]
    result = cli("serve", "--once", timeout=120)
    assert result.code == 0, result.stderr
    by_id = {t["id"]: t for t in tasks_json(cli)}
    assert by_id[reorganize]["state"] == "queued"
    assert all(by_id[t]["checkpoint"] == "integrated" for t in appends)


def test_kill_9_then_restart_loses_and_doubles_nothing(cli: Cli) -> None:
    make_yard(cli, "ada", command="sleep 2; imp")
    total = 6
    for i in range(total):
        add_task(cli, "ada", f"durable fact {i}")
    server = serve_process(cli, "--concurrency", "3")
    try:
        wait_for(lambda: running_boxes(cli, "ada") >= 2)
    finally:
        server.send_signal(signal.SIGKILL)
        server.communicate(timeout=30)
    result = cli("serve", "--once", "--concurrency", "3", timeout=300)
    assert result.code == 0, result.stderr
    tasks = tasks_json(cli)
    assert len(tasks) == total and {t["state"] for t in tasks} == {"done"}
    outcomes = Counter(t["checkpoint"] for t in tasks)
    assert set(outcomes) <= {"integrated", "quarantined"}
    notes = records(cli, "ada")
    assert len(notes) == len(set(notes)) == outcomes["integrated"]
    journal = [json.loads(line) for line in (cli.home / "journal.jsonl").read_text().splitlines()]
    integrated = Counter(e["run"] for e in journal if e["event"] == "knowledge.integrated")
    assert all(n == 1 for n in integrated.values()), "a run landed twice"
    assert len(integrated) == outcomes["integrated"]
    bodies = "".join(git("-C", repo(cli, "ada"), "show", f"main:{n}").stdout for n in notes)
    for i in range(total):
        assert bodies.count(f"durable fact {i}\n") <= 1
    runs = json.loads(cli("runs", "list", "--json").stdout)
    assert all(r["state"] == "finished" for r in runs)
    assert_linear_and_clean(repo(cli, "ada"))
    assert running_boxes(cli, "ada") == 0


def test_sigterm_quarantines_the_running_box_and_exits_zero(cli: Cli) -> None:
    make_yard(cli, "ada", command="sleep 60")
    add_task(cli, "ada", "a long task")
    server = serve_process(cli, env={"IMPYARD_SHUTDOWN_GRACE_SECONDS": "1"})
    try:
        wait_for(lambda: running_boxes(cli, "ada") == 1)
        server.send_signal(signal.SIGTERM)
        out, err = server.communicate(timeout=30)
    finally:
        if server.poll() is None:
            server.kill()
            server.communicate()
    assert server.returncode == 0, err
    (task,) = tasks_json(cli)
    assert task["checkpoint"] == "quarantined"
    shown = json.loads(cli("runs", "show", task["run_id"], "--json").stdout)
    assert shown["checkpoint"] == "quarantined"
    assert running_boxes(cli, "ada") == 0
    del out


def test_lost_engine_makes_serve_wait_not_exit(cli: Cli) -> None:
    make_yard(cli, "ada")
    task = add_task(cli, "ada", "waits for the engine")
    server = serve_process(cli, "--once", env={"DOCKER_HOST": "tcp://127.0.0.1:9"})
    try:
        assert server.stdout is not None
        assert ", engine down: " in server.stdout.readline()  # the start line
        assert "engine unreachable, waiting" in server.stdout.readline()
        time.sleep(1.5)
        assert server.poll() is None, "serve must keep waiting for the engine"
        server.send_signal(signal.SIGTERM)
        _out, err = server.communicate(timeout=30)
    finally:
        if server.poll() is None:
            server.kill()
            server.communicate()
    assert server.returncode == 0, err
    assert "Traceback" not in err
    (queued,) = tasks_json(cli)
    assert (queued["id"], queued["state"]) == (task, "queued")


def journal_events(cli: Cli) -> list[dict[str, Any]]:
    path = cli.home / "journal.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_second_signal_during_recovery_kills_and_quarantines_the_reattached_box(
    cli: Cli,
) -> None:
    """serve re-attached to a box whose host died: the second SIGTERM kills that box too,
    and the half-done run is quarantined, never integrated."""
    make_yard(cli, "ada", command="sleep 40; imp")
    add_task(cli, "ada", "a long task")
    first = serve_process(cli)
    try:
        wait_for(lambda: running_boxes(cli, "ada") == 1)
    finally:
        first.send_signal(signal.SIGKILL)  # the host dies; the box keeps running
        first.communicate(timeout=30)
    second = serve_process(cli, env={"IMPYARD_SHUTDOWN_GRACE_SECONDS": "60"})
    try:
        wait_for(lambda: any(e["event"] == "run.recovering" for e in journal_events(cli)))
        second.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        second.send_signal(signal.SIGTERM)
        _out, err = second.communicate(timeout=20)
    finally:
        if second.poll() is None:
            second.kill()
            second.communicate()
    assert second.returncode == 0, err
    (run,) = json.loads(cli("runs", "list", "--json").stdout)
    shown = json.loads(cli("runs", "show", run["run_id"], "--json").stdout)
    assert shown["checkpoint"] == "quarantined", shown
    assert records(cli, "ada") == []
    assert running_boxes(cli, "ada") == 0


def test_serve_leaves_a_live_foreground_run_to_its_owner(cli: Cli) -> None:
    make_yard(cli, "ada")
    foreground = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "impyard",
            "--home",
            str(cli.home),
            "run",
            "ada",
            "--prompt",
            "a fact",
            "--command",
            "sleep 6; imp",
            "--json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **GIT_ENV},
    )
    try:
        wait_for(lambda: running_boxes(cli, "ada") == 1)
        served = cli("serve", "--once", timeout=60)
        out, err = foreground.communicate(timeout=60)
    finally:
        if foreground.poll() is None:
            foreground.kill()
            foreground.communicate()
    assert served.code == 0, served.stderr
    assert foreground.returncode == 0, err
    record = json.loads(out)
    assert record["checkpoint"] == "integrated"
    recovered = [e for e in journal_events(cli) if e["event"].startswith("run.recover")]
    assert recovered == [], "serve adopted a run whose owner was alive"
    assert len(records(cli, "ada")) == 1


#: One line of serve's output: the UTC time, then no control or bidi control character.
SERVE_LINE = re.compile(
    r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ [^\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e]+"
)
#: A file whose name reverses what the terminal shows after it (U+202E, a name the
#: snapshot takes as it is) where an append run may not write, and one more: rejected,
#: the box-chosen name first among two reasons.
EVIL = (
    'printf x > "$IMPYARD_KNOWLEDGE_DIR/organization/$(printf "a\\342\\200\\256gpj.md")"; '
    'printf y > "$IMPYARD_KNOWLEDGE_DIR/organization/second.md"'
)


def test_serve_once_says_what_happened_one_line_per_event(cli: Cli) -> None:
    import docker

    make_yard(cli, "ada")
    assert cli("imp", "create", "evil", "--command", EVIL).code == 0
    rejects = add_task(cli, "evil", "break the screen")
    lands = add_task(cli, "ada", "a fact")
    result = cli("serve", "--once", "--concurrency", "1", timeout=120)
    assert result.code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert all(SERVE_LINE.fullmatch(line) for line in lines), result.stdout
    client = docker.from_env()
    try:
        engine = client.version()["Version"]
    finally:
        client.close()
    digest = hashlib.sha256((cli.home / "policy" / "compiled.json").read_bytes()).hexdigest()
    assert lines[0].endswith(
        f" impyard serve: data root {cli.home}, concurrency 1, --once, imps: ada, evil, "
        f"policy {digest[:12]}, engine {engine}"
    )
    runs = {t["id"]: t["run_id"] for t in tasks_json(cli)}
    rejected = json.loads(cli("runs", "show", runs[rejects], "--json").stdout)
    first = rejected["validation_errors"][0]
    assert first["path"] == "organization/a\u202egpj.md", first
    landed = json.loads(cli("runs", "show", runs[lands], "--json").stdout)
    # The time, then what happened; the two tasks' lines may interleave, each in order.
    events = [line.split(" ", 1)[1] for line in lines[1:-1]]
    assert len(events) == 4, result.stdout
    assert [e for e in events if e.startswith(f"task {rejects} ")] == [
        f"task {rejects} run {runs[rejects]} evil: started",
        f"task {rejects} run {runs[rejects]} evil: rejected: "
        f"organization/a\\u202egpj.md: {first['rule']} (…and 1 more)",
    ]
    assert [e for e in events if e.startswith(f"task {lands} ")] == [
        f"task {lands} run {runs[lands]} ada: started",
        f"task {lands} run {runs[lands]} ada: integrated {landed['produced_commit'][:12]}",
    ]
    assert lines[-1].endswith(
        " impyard serve: stopped (--once): queue drained: queued 0  landed 1  empty 0  "
        "rejected 1  conflict 0  quarantined 0  failed 0"
    )
