"""Rework: a refused run's files go back to the same imp with every violation, and what it
fixes lands under the new run's namespace (real engine, real CLI, a busybox box whose
command reads its task file and fixes exactly the problems listed there)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.cli import Cli, json_lines
from tests.helpers.git import git
from tests.helpers.policy import edit_org

pytestmark = pytest.mark.docker

NOTE = (
    "---\\nid: %s_%s\\ncreated_at: 2026-01-01T00:00:00Z\\n%bsource_urls:\\n"
    "- https://example.com/%s\\n---\\n%s\\n"
)
# The first run writes two notes, one with a key records may not have; a rework run
# (its task file says so) deletes the `title:` line of each file a violation names for
# it, and touches nothing else. It prints its task file: what the agent was told.
IMP = f"""
K=$IMPYARD_KNOWLEDGE_DIR; T=$IMPYARD_TASK_FILE; NS=$IMPYARD_KNOWLEDGE_NAMESPACE
cat "$T"
if grep -q '^# Rework of run' "$T"; then
  [ -n "${{NO_FIX:-}}" ] && exit 0
  grep -E "^- records/[^:]*: frontmatter: .*unknown key 'title'" "$T" |
    sed -E 's/^- ([^:]*): .*/\\1/' | while read -r p; do sed -i '/^title:/d' "$K/$p"; done
else
  mkdir -p "$K/records/vendors"
  printf -- '{NOTE}' "$NS" 1 'title: Acme\\n' acme 'Acme sells anvils.' \\
    > "$K/records/vendors/acme--${{NS}}_1.md"
  printf -- '{NOTE}' "$NS" 2 '' globex 'Globex sells lamps.' \\
    > "$K/records/vendors/globex--${{NS}}_2.md"
fi
"""


def yard(cli: Cli, command: str = IMP, attempts: int | None = None) -> Cli:
    assert cli("init").code == 0
    if attempts is not None:
        edit_org(cli.home, "rework_attempts = 0", f"rework_attempts = {attempts}")
        deployed = cli("deploy")
        assert deployed.code == 0, deployed.stderr
    created = cli("imp", "create", "yuko", "--command", command)
    assert created.code == 0, created.stderr
    return cli


def repo(cli: Cli) -> Path:
    return Path(cli("knowledge", "yuko").stdout.strip())


def main_records(cli: Cli) -> list[str]:
    listed = git("-C", repo(cli), "ls-tree", "-r", "--name-only", "main", "records/").stdout
    return sorted(p for p in listed.split() if p != "records/README.md")


def show(cli: Cli, run_id: str) -> dict[str, Any]:
    shown = cli("runs", "show", run_id, "--json")
    assert shown.code == 0, shown.stderr
    record: dict[str, Any] = json.loads(shown.stdout)
    return record


def task_list(cli: Cli) -> list[dict[str, Any]]:
    listed: list[dict[str, Any]] = json.loads(cli("task", "list", "--json").stdout)
    return listed


def serve_once(cli: Cli) -> None:
    served = cli("serve", "--once", timeout=300)
    assert served.code == 0, served.stdout + served.stderr


@pytest.mark.parametrize("checkout", ["overlay", "copy"])
def test_a_rework_lands_the_refused_notes_fixed_under_its_own_namespace(
    cli: Cli, checkout: str
) -> None:
    env = {"IMPYARD_CHECKOUT": checkout}
    yard(cli)
    first = cli("run", "yuko", "--prompt", "Note what Acme sells.", "--json", env=env)
    assert first.code == 3, first.stdout + first.stderr
    refused = json.loads(first.stdout)
    old_ns, run_id = refused["namespace"], refused["run_id"]
    assert [(v["path"], v["rule"]) for v in refused["validation_errors"]] == [
        (f"records/vendors/acme--{old_ns}_1.md", "frontmatter")
    ]

    queued = cli("candidates", "rework", run_id, "--note", "Keep the bodies as they are.")
    assert queued.code == 0, queued.stderr
    task_id = re.match(r"queued (task-[0-9a-f]+): rework of ", queued.stdout)
    assert task_id is not None, queued.stdout
    [task] = task_list(cli)
    assert (task["id"], task["rework_of"], task["rework_attempt"]) == (task_id[1], run_id, 1)
    assert task["prompt"] == "Note what Acme sells."
    assert run_id in cli("task", "list").stdout

    served = cli("serve", "--once", env=env, timeout=300)
    assert served.code == 0, served.stdout + served.stderr
    [task] = task_list(cli)
    assert task["checkpoint"] == "integrated", task
    rework = show(cli, task["run_id"])
    new_ns = rework["namespace"]
    assert rework["rework_of"] == run_id and new_ns != old_ns

    # Both notes landed, in the new namespace with their ids to match, the title gone.
    assert main_records(cli) == [
        f"records/vendors/acme--{new_ns}_1.md",
        f"records/vendors/globex--{new_ns}_2.md",
    ]
    acme = git("-C", repo(cli), "show", f"main:records/vendors/acme--{new_ns}_1.md").stdout
    assert acme.startswith(f"---\nid: {new_ns}_1\n") and "title:" not in acme
    assert acme.endswith("---\nAcme sells anvils.\n")
    # Every commit the rework landed names the run it reworks.
    trailers = git("-C", repo(cli), "log", "--format=%(trailers:key=Impyard-Rework-Of)", "main")
    named = [line for line in trailers.stdout.splitlines() if line.strip()]
    assert named == [f"Impyard-Rework-Of: {run_id}"]

    # What the agent was told: the prompt, the violation under its new name, the note.
    told = cli("runs", "logs", task["run_id"]).stdout
    assert "> Note what Acme sells." in told
    assert f"- records/vendors/acme--{new_ns}_1.md: frontmatter: " in told
    assert "unknown key 'title'" in told
    assert "> Keep the bodies as they are." in told
    assert f"(was records/vendors/acme--{old_ns}_1.md)" in told

    # The chain, both ways.
    assert show(cli, run_id)["reworked_by"] == [
        {"task": task["id"], "run": task["run_id"], "state": "done", "checkpoint": "integrated"}
    ]
    original = cli("runs", "show", run_id).stdout
    assert f"reworked by       {task['run_id']} (integrated)" in original
    assert f"rework of         {run_id}" in cli("runs", "show", task["run_id"]).stdout
    [event] = json_lines(cli("journal", "--event", "task.rework_queued", "--json").stdout)
    assert (event["run"], event["original"], event["task"]) == (run_id, run_id, task["id"])


def test_rework_attempts_queue_one_rework_that_lands_the_note_once(cli: Cli) -> None:
    yard(cli, attempts=1)
    added = cli("task", "add", "yuko", "--prompt", "Note what Acme sells.")
    assert added.code == 0, added.stderr
    serve_once(cli)

    first, second = task_list(cli)
    assert first["checkpoint"] == "rejected"
    assert second["rework_of"] == first["run_id"] and second["checkpoint"] == "integrated"
    assert second["rework_root"] == first["id"] and second["rework_attempt"] == 1
    new_ns = show(cli, second["run_id"])["namespace"]
    assert main_records(cli) == [
        f"records/vendors/acme--{new_ns}_1.md",
        f"records/vendors/globex--{new_ns}_2.md",
    ]
    landed = git("-C", repo(cli), "log", "--format=%H", "main", "--", "records/vendors")
    assert len(landed.stdout.split()) == 1
    [event] = json_lines(cli("journal", "--event", "task.rework_queued", "--json").stdout)
    assert (event["run"], event["task"]) == (first["run_id"], second["id"])


def test_rework_attempts_stop_after_that_many_reworks_of_one_task(cli: Cli) -> None:
    yard(cli, command="NO_FIX=1\n" + IMP, attempts=1)
    assert cli("task", "add", "yuko", "--prompt", "Note what Acme sells.").code == 0
    serve_once(cli)
    first, second = task_list(cli)  # the rework fixed nothing: no second rework
    assert (first["checkpoint"], second["checkpoint"]) == ("rejected", "rejected")
    assert second["rework_of"] == first["run_id"]
    assert main_records(cli) == []


def test_without_rework_attempts_a_rejection_queues_nothing(cli: Cli) -> None:
    yard(cli)
    assert cli("task", "add", "yuko", "--prompt", "Note what Acme sells.").code == 0
    serve_once(cli)
    [only] = task_list(cli)
    assert only["checkpoint"] == "rejected" and only["rework_of"] is None
    assert cli("journal", "--event", "task.rework_queued", "--json").stdout == ""
    assert show(cli, only["run_id"])["reworked_by"] == []
