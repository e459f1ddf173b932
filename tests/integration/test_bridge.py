"""The bridge out of a tainted run against the real engine: ``impyard-task`` in a channel
run files a clean task that lands; a filed prompt naming a participant of the channel is
refused; under ``any-run`` a tainted run's files get the same scan at the lane; and a
rework of a tainted candidate stays tainted and lands nothing."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.helpers.cli import Cli, json_lines
from tests.helpers.cli import run_json as run
from tests.helpers.git import git
from tests.helpers.policy import edit_org

pytestmark = pytest.mark.docker

PARTICIPANT = "Bea Quill"
FILE = 'impyard-task --prompt "Research Acme SSO pricing tiers."; echo "filed=$?"'
NAMING = f'impyard-task --prompt "Ask {PARTICIPANT.lower()} what Acme costs."; echo "named=$?"'


def note(body: str) -> str:
    return f'printf "{body}\\n" | impyard-note vendors acme-sso --source https://example.com/r'


@pytest.fixture
def yard(yuko: Cli) -> Cli:
    """Imp yuko, with a memory entry of channel support by a participant."""
    cli = yuko
    added = cli(
        "memory", "yuko", "add", "wants SSO prices", "--channel", "support", "--user", PARTICIPANT
    )
    assert added.code == 0, added.stderr
    return cli


def tasks(cli: Cli) -> list[dict[str, Any]]:
    listed: list[dict[str, Any]] = json.loads(cli("task", "list", "--json").stdout)
    return listed


def main_records(cli: Cli) -> list[str]:
    repo = cli("knowledge", "yuko").stdout.strip()
    listed = git("-C", repo, "ls-tree", "-r", "--name-only", "main", "records").stdout
    return listed.splitlines()


def test_a_channel_run_files_a_clean_task_that_lands_and_one_naming_a_participant_is_refused(
    yard: Cli,
) -> None:
    code, record = run(yard, f"{FILE}; {NAMING}", "--channel", "support")
    assert code == 0 and record["tainted"] is True, record
    shown = (yard.home / "runs" / record["run_id"] / "box.log").read_text()
    assert "filed=0" in shown and "(it runs clean)" in shown
    assert "named=1" in shown
    assert "names a conversation participant; that belongs in memory (display name)" in shown
    [task] = tasks(yard)
    assert record["filed_tasks"] == [task["id"]]
    assert (task["filed_by"], task["channel"]) == (record["run_id"], None)
    assert task["prompt"] == "Research Acme SSO pricing tiers."
    assert "impyard-task" in yard("task", "show", task["id"]).stdout
    journal = json_lines(yard("journal", "--json").stdout)
    [filed] = [e for e in journal if e["event"] == "task.filed"]
    assert filed["task"] == task["id"] and filed["prompt"] == task["prompt"]
    [refused] = [e for e in journal if e["event"] == "task.refused"]
    assert refused["named"] == ["display name"]
    assert PARTICIPANT.lower() not in json.dumps(refused).lower()  # the name is not kept

    served = yard("serve", "--once", timeout=300)
    assert served.code == 0, served.stdout + served.stderr
    [task] = tasks(yard)
    assert task["checkpoint"] == "integrated", task
    landed = json.loads(yard("runs", "show", task["run_id"], "--json").stdout)
    assert landed["tainted"] is False
    notes = [path for path in main_records(yard) if path.count("/") == 2]
    assert [path.split("/")[1] for path in notes] == ["tasks"]


def test_a_clean_run_has_no_bridge_to_use(yard: Cli) -> None:
    code, record = run(yard, FILE)
    assert code == 0 and record["tainted"] is False
    shown = (yard.home / "runs" / record["run_id"] / "box.log").read_text()
    assert "filed=1" in shown and "carries no conversation content" in shown
    assert tasks(yard) == []


def test_any_run_scans_a_tainted_runs_files_for_participants(yard: Cli) -> None:
    edit_org(yard.home, 'write_from = "clean-room"', 'write_from = "any-run"')
    assert yard("deploy").code == 0
    check = f'{note(f"Per {PARTICIPANT}, SSO costs extra.")}; impyard-check; echo "check=$?"'
    code, refused = run(yard, check, "--channel", "support")
    assert code == 3, refused
    assert [(v["rule"], v["path"].split("/")[1]) for v in refused["validation_errors"]] == [
        ("participant-named", "vendors")
    ]
    shown = (yard.home / "runs" / refused["run_id"] / "box.log").read_text()
    assert "participant-named" in shown and "check=1" in shown  # the box saw it first
    code, clean = run(yard, note("SSO costs extra on the basic tier."), "--channel", "support")
    assert code == 0 and clean["checkpoint"] == "integrated", clean


def test_a_rework_of_a_tainted_candidate_is_tainted_and_lands_nothing(yard: Cli) -> None:
    edit_org(yard.home, 'write_from = "clean-room"', 'write_from = "any-run"')
    assert yard("deploy").code == 0
    edit = f'{note("SSO costs extra.")}; echo changed >> "$IMPYARD_KNOWLEDGE_DIR/README.md"'
    code, refused = run(yard, edit, "--channel", "support")
    assert code == 3 and refused["candidate_ref"], refused
    edit_org(yard.home, 'write_from = "any-run"', 'write_from = "clean-room"')
    assert yard("deploy").code == 0
    before = main_records(yard)
    assert yard("candidates", "rework", refused["run_id"]).code == 0
    served = yard("serve", "--once", timeout=300)
    assert "Traceback" not in served.stderr, served.stderr
    [task] = tasks(yard)
    rework = json.loads(yard("runs", "show", task["run_id"], "--json").stdout)
    # Its checkout is read-only: the imp cannot write its note, and the run is quarantined.
    assert rework["tainted"] is True and rework["checkpoint"] == "quarantined", rework
    assert main_records(yard) == before
    # What it left (the candidate's files, renamed into its namespace) never lands.
    retried = yard("quarantine", "retry", task["run_id"], "--json")
    answer = json.loads(retried.stdout)
    assert retried.code == 3 and "tainted-run" in json.dumps(answer), answer
    assert main_records(yard) == before
