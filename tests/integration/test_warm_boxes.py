"""Ready boxes against the real engine: a pool box is its cold box with another name and
labels, serves one run and is gone, leaks nothing of one run into the next, and its pools
follow serve (a crash, a deploy, a box that died while it waited). Both runtimes."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers.cli import Cli
from tests.helpers.policy import edit_org
from tests.helpers.runs import allocated_bytes
from tests.helpers.warm import (
    inspect,
    inspect_stats,
    kill,
    pool_boxes,
    ready_count,
    remove_pool_boxes,
    serving,
    wait_for,
)
from tests.helpers.web import console_for, log_in

pytestmark = pytest.mark.docker

NOTE = 'printf "body\\n" | impyard-note vendors acme-sso --source https://example.com/report'


def run(cli: Cli, command: str) -> dict[str, Any]:
    result = cli("run", "yuko", "--prompt", "research acme", "--json", "--command", command)
    assert "Traceback" not in result.stderr, result.stderr
    record: dict[str, Any] = json.loads(result.stdout)
    return record


@pytest.fixture
def yard(cli: Cli) -> Iterator[Cli]:
    assert cli("init").code == 0
    assert cli("imp", "create", "yuko").code == 0
    edit_org(cli.home, "boxes = 0", "boxes = 1")
    assert cli("deploy").code == 0
    # An imp's first run (no ready box yet) leaves the shape serve keeps boxes of.
    first = run(cli, "true")
    assert first["warm"] is False and first["exit_code"] == 0, first
    try:
        yield cli
    finally:
        remove_pool_boxes(cli.home)


def trash(cli: Cli) -> list[Path]:
    return list((cli.home / "warm" / ".trash").glob("*"))


def log_of(cli: Cli, record: dict[str, Any]) -> str:
    return (cli.home / "runs" / record["run_id"] / "box.log").read_text()


def full_pool(cli: Cli, n: int = 1) -> None:
    wait_for(f"{n} ready box(es)", lambda: ready_count(cli.home) >= n)


#: What the engine fixes once a box runs: a warm box must have its cold box's values.
HOST_FIELDS = (
    "CapAdd",
    "CapDrop",
    "SecurityOpt",
    "ReadonlyRootfs",
    "Tmpfs",
    "NetworkMode",
    "Runtime",
    "Memory",
    "MemorySwap",
    "NanoCpus",
    "PidsLimit",
    "Privileged",
    "IpcMode",
    "PidMode",
    "UsernsMode",
    "LogConfig",
)


def fixed_fields(info: dict[str, Any]) -> dict[str, Any]:
    host = info["HostConfig"]
    return {
        **{k: host.get(k) for k in HOST_FIELDS},
        "User": info["Config"]["User"],
        "Image": info["Image"],
        "NetworkDisabled": info["Config"].get("NetworkDisabled"),
        "Mounts": sorted((m["Destination"], m["RW"]) for m in info["Mounts"]),
    }


def inspect_while_running(cli: Cli, command: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run ``command`` (it must outlive an inspect), inspecting the run's box meanwhile."""
    seen: dict[str, Any] = {}
    done: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: done.update(run(cli, command)))
    thread.start()
    try:

        def running_box() -> bool:
            for path in (cli.home / "runs").glob("*/manifest.json"):
                manifest = json.loads(path.read_text())
                if manifest["state"] == "running" and manifest.get("container_id"):
                    seen.update(inspect(manifest["container_id"]))
                    return True
            return False

        wait_for("a running box", running_box)
    finally:
        thread.join()
    return seen, done


def test_a_warm_box_is_its_cold_box_but_for_name_and_labels(yard: Cli) -> None:
    cold, cold_run = inspect_while_running(yard, "sleep 2")  # no serve: no ready box
    assert cold_run["warm"] is False and cold_run["exit_code"] == 0, cold_run
    with serving(yard.home):
        full_pool(yard)
        warm, warm_run = inspect_while_running(yard, "sleep 2")
    assert warm_run["warm"] is True and warm_run["exit_code"] == 0, warm_run
    assert warm["Id"] == warm_run["container_id"]
    assert "claim" in warm_run["timings_ms"]
    assert fixed_fields(warm) == fixed_fields(cold)
    assert warm["Name"] != cold["Name"]
    assert warm["Config"]["Labels"] != cold["Config"]["Labels"]


def test_a_warm_box_serves_one_run_and_nothing_of_it_reaches_the_next(yard: Cli) -> None:
    first_cmd = f'{NOTE}; echo left > /tmp/left-behind; (sleep 300 &); echo "$IMPYARD_RUN_ID"'
    look = 'ls -a /tmp; ps -o pid,args; env | grep -c IMPYARD_RUN_ID=; echo "$IMPYARD_RUN_ID"'
    with serving(yard.home):
        full_pool(yard)
        first = run(yard, first_cmd)
        full_pool(yard)
        second = run(yard, look)
    assert first["warm"] is True and second["warm"] is True, (first, second)
    assert first["checkpoint"] == "integrated", first
    assert first["container_id"] != second["container_id"]
    shown = log_of(yard, second)
    assert "left-behind" not in shown
    assert "sleep 300" not in shown
    assert first["run_id"] not in shown and second["run_id"] in shown
    assert first["container_id"] not in pool_boxes(yard.home, all=True)  # removed after its run
    # And its directory (checkout, origin links), moved out of the pools and deleted.
    assert not list((yard.home / "warm").glob(f"*/{first['container_name']}"))
    wait_for("the finished boxes' directories deleted", lambda: not trash(yard))
    listed = yard("runs", "show", first["run_id"], "--json")
    assert json.loads(listed.stdout)["warm"] is True
    samples = metrics(yard)
    assert samples[("impyard_warm_claims_total", (("result", "hit"),))] == 2
    assert samples[("impyard_warm_claims_total", (("result", "miss"),))] == 1  # the first run
    warm = json.loads(yard("status", "--json").stdout)["warm"]
    assert (warm["hits"], warm["misses"], warm["recent_runs"]) == (2, 1, 3), warm
    assert warm["claim_ms_p50"] > 0 and [p["wanted"] for p in warm["pools"]] == [1], warm
    assert "2 hit(s), 1 miss(es)" in yard("status").stdout
    console, client = console_for(yard.home)
    log_in(console, client)
    assert "2 hits, 1 misses" in client.get("/").text
    assert samples[("impyard_run_phase_seconds_count", (("phase", "claim"),))] == 2


def metrics(cli: Cli) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    _, client = console_for(cli.home, metrics_public=True)
    text = client.get("/metrics").text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_kill_9_of_serve_with_a_full_pool_leaves_no_box_after_the_next_start(yard: Cli) -> None:
    with serving(yard.home) as serve:
        full_pool(yard)
        left = set(pool_boxes(yard.home))
        assert left
        serve.send_signal(signal.SIGKILL)
        serve.wait(timeout=30)
    assert set(pool_boxes(yard.home)) == left  # nothing removed them: serve died
    # A box directory a run's end moved out, the dead serve's thread never deleted.
    (yard.home / "warm" / ".trash" / "a-box" / "origin").mkdir(parents=True)
    with serving(yard.home):
        wait_for(
            "the dead serve's boxes gone", lambda: not left & set(pool_boxes(yard.home, all=True))
        )
        full_pool(yard)
    assert pool_boxes(yard.home, all=True) == {}  # and a clean stop removes the new pool
    assert not trash(yard)


def test_a_deploy_that_changes_the_box_drains_the_pool(yard: Cli) -> None:
    with serving(yard.home):
        full_pool(yard)
        before = set(pool_boxes(yard.home))
        edit_org(yard.home, "pids_limit = 256", "pids_limit = 200")
        assert yard("deploy").code == 0
        wait_for("the stale box gone", lambda: not before & set(pool_boxes(yard.home, all=True)))
        wait_for("a box of the new shape", lambda: len(pool_boxes(yard.home)) == 1)
        (now,) = pool_boxes(yard.home)
        assert inspect(now)["HostConfig"]["PidsLimit"] == 200
        # An imp that opts out: its pool goes too.
        yard.home.joinpath("policy", "imps", "yuko.toml").write_text("[box.warm]\nboxes = 0\n")
        assert yard("deploy").code == 0
        wait_for("an opted-out pool gone", lambda: pool_boxes(yard.home, all=True) == {})


def test_a_box_that_dies_while_it_waits_is_replaced(yard: Cli) -> None:
    with serving(yard.home):
        full_pool(yard)
        (dead,) = pool_boxes(yard.home)
        kill(dead)
        wait_for("a new ready box", lambda: set(pool_boxes(yard.home)) - {dead} != set())
        wait_for("the dead box removed", lambda: dead not in pool_boxes(yard.home, all=True))
        record = run(yard, NOTE)
    assert record["warm"] is True and record["container_id"] != dead, record


def test_a_foreground_run_and_serve_never_share_a_ready_box(yard: Cli) -> None:
    with serving(yard.home):
        full_pool(yard)
        assert yard("task", "add", "yuko", "--prompt", "fact").code == 0
        foreground = run(yard, NOTE)

        def task_done() -> bool:
            tasks = json.loads(yard("task", "list", "--json").stdout)
            return all(t["state"] not in ("queued", "running") for t in tasks)

        wait_for("the task ended", task_done)
    manifests = [json.loads(p.read_text()) for p in (yard.home / "runs").glob("*/manifest.json")]
    warm_boxes = [m["container_id"] for m in manifests if m["warm"]]
    assert foreground["checkpoint"] == "integrated", foreground
    assert warm_boxes, manifests
    assert len(warm_boxes) == len(set(warm_boxes))  # no box served two runs


def test_a_run_with_no_ready_box_starts_its_own(yard: Cli) -> None:
    record = run(yard, NOTE)  # no serve: nothing fills the pool
    assert record["warm"] is False and record["checkpoint"] == "integrated", record


def test_a_box_whose_run_ended_before_its_command_started_is_removed(yard: Cli) -> None:
    with serving(yard.home):
        full_pool(yard)
        (box,) = pool_boxes(yard.home)
        # Files in the ready box's knowledge directory that no record says are a checkout
        # of the run's imp and base: the run's checkout is refused.
        (knowledge,) = (yard.home / "warm").glob("*/*/space/knowledge")
        (knowledge / "stray").write_text("x")
        (knowledge.parent.parent / "prefill.json").unlink()
        record = run(yard, NOTE)
        assert record["warm"] is True and record["checkpoint"] == "quarantined", record
        assert "not empty" in record["reason"], record
        wait_for("the abandoned box removed", lambda: box not in pool_boxes(yard.home, all=True))


def test_a_ready_box_older_than_its_bound_is_replaced(yard: Cli) -> None:
    edit_org(yard.home, "max_age_seconds = 3600", "max_age_seconds = 2")
    assert yard("deploy").code == 0
    with serving(yard.home):
        full_pool(yard)
        (old,) = pool_boxes(yard.home)
        wait_for("the old box gone", lambda: old not in pool_boxes(yard.home, all=True))
        wait_for("its replacement", lambda: len(pool_boxes(yard.home)) == 1)


def test_a_warm_box_that_writes_past_its_space_fills_its_own_not_the_data_root(
    yard: Cli,
) -> None:
    """A ready box's checkout is in a space of its own, sized from max_repo_bytes as a cold
    run's is: a box writing 500 MB with a 10 MB limit hits ENOSPC in the box."""
    edit_org(yard.home, "max_repo_bytes = 1000000000", "max_repo_bytes = 10000000")
    assert yard("deploy").code == 0
    run(yard, "true")  # the shape of a run under the new limit
    fill = 'dd if=/dev/zero of="$IMPYARD_KNOWLEDGE_DIR/records/fill" bs=1048576 count=500'
    with serving(yard.home):
        wait_for("a box of the new limit", lambda: ready_count(yard.home) >= 1)
        record = run(yard, fill)
        assert record["warm"] is True and record["checkpoint"] == "quarantined", record
        assert str(record["reason"]).endswith("is full"), record
        assert allocated_bytes(yard.home) < 100 * 2**20
    assert "No space left on device" in log_of(yard, record)


def cpu_seconds(container_id: str) -> float:
    """CPU time the box has used so far (the engine's cgroup count)."""
    stats = inspect_stats(container_id)
    return float(stats["cpu_stats"]["cpu_usage"]["total_usage"]) / 1e9


def test_an_idle_ready_box_of_a_debian_image_waits_without_spinning(cli: Cli) -> None:
    """Debian's /bin/sh (dash) has no `read -t`: the gate must still wait, not loop."""
    assert cli("init").code == 0
    assert cli("imp", "create", "deb", "--image", "impyard-pi:latest").code == 0
    edit_org(cli.home, "boxes = 0", "boxes = 1")
    assert cli("deploy").code == 0
    try:
        first = cli("run", "deb", "--prompt", "x", "--json", "--command", "true")
        assert json.loads(first.stdout)["warm"] is False, first
        with serving(cli.home):
            full_pool(cli)
            (box,) = pool_boxes(cli.home)
            before = cpu_seconds(box)
            time.sleep(2)
            used = cpu_seconds(box) - before
            # Waiting costs 2% of a core under runc, 18% under runsc (measured); a gate
            # that spins on dash's refusal burned 1.5 cores.
            assert used < 1.0, f"an idle ready box used {used:.2f} s of CPU in 2 s"
            record = run_deb(cli, NOTE)
        assert record["warm"] is True and record["checkpoint"] == "integrated", record
    finally:
        remove_pool_boxes(cli.home)


def run_deb(cli: Cli, command: str) -> dict[str, Any]:
    result = cli("run", "deb", "--prompt", "research acme", "--json", "--command", command)
    assert "Traceback" not in result.stderr, result.stderr
    record: dict[str, Any] = json.loads(result.stdout)
    return record


def test_a_ready_box_holds_the_checkout_of_its_imp_for_that_imps_next_run_only(cli: Cli) -> None:
    assert cli("init").code == 0
    for imp in ("kenji", "yuko"):
        assert cli("imp", "create", imp).code == 0
    edit_org(cli.home, "boxes = 0", "boxes = 1")
    assert cli("deploy").code == 0

    def run_of(imp: str, command: str) -> dict[str, Any]:
        done = cli("run", imp, "--prompt", "x", "--json", "--command", command)
        record: dict[str, Any] = json.loads(done.stdout)
        assert record["checkpoint"] == "integrated", done
        return record

    try:
        # yuko asks last: new boxes hold yuko's main.
        firsts = {imp: run_of(imp, NOTE)["namespace"] for imp in ("kenji", "yuko")}
        look = f'find "$IMPYARD_KNOWLEDGE_DIR/records" -name "*.md"; {NOTE}'
        with serving(cli.home):
            full_pool(cli)
            (box,) = pool_boxes(cli.home)
            held = json.loads(next((cli.home / "warm").glob("*/*/prefill.json")).read_text())
            assert held["imp"] == "yuko", held
            other = run_of("kenji", look)
            mine = run_of("yuko", look)
    finally:
        remove_pool_boxes(cli.home)
    assert other["warm"] is False, other  # not yuko's box
    assert mine["warm"] is True and mine["container_id"] == box, mine
    assert mine["base_commit"] == held["base"], mine
    shown = log_of(cli, mine)
    assert firsts["yuko"] in shown and firsts["kenji"] not in shown, shown
    # Its checkout was taken as the run's: the new note landed beside the first.
    assert mine["namespace"] in shown


def test_a_prefilled_ready_box_lands_its_runs_edits_and_deletions_and_keeps_no_mount(
    yard: Cli,
) -> None:
    """A box serve fills ahead of a run holds its imp's main under an overlay the host
    mounted: a reorganizing run on it edits one file and deletes another, and its commit
    holds those two changes and nothing of the copy beneath; once it ended, no mount of the
    box is left."""

    def reorganize(command: str) -> dict[str, Any]:
        result = yard(
            "run",
            "yuko",
            "--reorganize",
            "--prompt",
            "tidy",
            "--json",
            "--command",
            f'cd "$IMPYARD_KNOWLEDGE_DIR/organization" && {command}',
        )
        record: dict[str, Any] = json.loads(result.stdout)
        assert record["checkpoint"] == "integrated", (record["reason"], record["validation_errors"])
        return record

    reorganize('printf "a\\n" > index.md && printf "b\\n" > old.md')
    with serving(yard.home):
        full_pool(yard)
        (box,) = pool_boxes(yard.home)
        record = reorganize('rm old.md && printf "more\\n" >> index.md')
    assert record["warm"] is True and record["container_id"] == box, record
    assert record["checkout"]["kind"] == "overlay", record["checkout"]
    repo = yard.home / "knowledge" / "yuko" / "repo.git"
    shown = subprocess.run(
        ["git", "-C", str(repo), "show", "--name-status", "--format=", record["produced_commit"]],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert shown.split("\n") == ["M\torganization/index.md", "D\torganization/old.md", ""], shown
    assert str(yard.home / "warm") not in Path("/proc/self/mountinfo").read_text()
