"""The clean room against the real engine: a run carrying a channel's Memory block
(tainted) cannot write its checkout and lands nothing; under ``write_from = "any-run"``
it may; and a tainted run's candidate is refused ``tainted-run`` once the clean room is
back, whatever its retry."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.helpers.cli import Cli, json_lines
from tests.helpers.cli import run_json as run
from tests.helpers.git import git
from tests.helpers.policy import edit_org

pytestmark = pytest.mark.docker

NOTE = 'printf "body\\n" | impyard-note vendors acme-sso --source https://example.com/report'
WRITE = 'touch "$IMPYARD_KNOWLEDGE_DIR/records/scratch.md" && echo wrote || echo "refused: $?"'


def log_of(cli: Cli, record: dict[str, Any]) -> str:
    return (cli.home / "runs" / record["run_id"] / "box.log").read_text()


def main_of(cli: Cli) -> str:
    repo = cli("knowledge", "yuko").stdout.strip()
    return git("-C", repo, "rev-parse", "main").stdout.strip()


def test_a_channel_run_reads_its_checkout_and_writes_nothing(yuko: Cli) -> None:
    before = main_of(yuko)
    command = (
        f'ls "$IMPYARD_KNOWLEDGE_DIR"; {WRITE}; {NOTE}; impyard-check; echo "check=$?"; '
        'echo "ro=$IMPYARD_KNOWLEDGE_READ_ONLY"'
    )
    code, record = run(yuko, command, "--channel", "support")
    assert code == 0 and record["checkpoint"] == "empty", record
    assert record["tainted"] is True and "support" in record["taint"], record
    shown = log_of(yuko, record)
    assert "README.md" in shown  # it reads its checkout
    assert "wrote" not in shown and "refused:" in shown  # and cannot write it
    assert "check=2" in shown  # the host refuses to check a read-only run's checkout
    assert "ro=tainted run: knowledge is read-only" in shown
    assert main_of(yuko) == before
    text = yuko("runs", "show", record["run_id"]).stdout
    assert "tainted" in text and "support" in text
    journal = json_lines(yuko("journal", "--json").stdout)
    created = [e for e in journal if e["event"] == "run.created"]
    assert "support" in created[-1]["tainted"], created[-1]
    # The same run without the channel is clean and lands its note.
    code, clean = run(yuko, NOTE)
    assert code == 0 and clean["checkpoint"] == "integrated" and clean["tainted"] is False


def test_any_run_lets_a_channel_run_land_and_clean_room_refuses_its_candidate_after(
    yuko: Cli,
) -> None:
    edit_org(yuko.home, 'write_from = "clean-room"', 'write_from = "any-run"')
    assert yuko("deploy").code == 0
    code, landed = run(yuko, NOTE, "--channel", "support")
    assert code == 0 and landed["checkpoint"] == "integrated", landed
    assert landed["tainted"] is True
    # A tainted candidate kept while any-run was set (refused for its README edit) ...
    edit = f'{NOTE}; echo changed >> "$IMPYARD_KNOWLEDGE_DIR/README.md"'
    code, refused = run(yuko, edit, "--channel", "support")
    assert code == 3 and refused["candidate_ref"], refused
    # ... is refused tainted-run, never landed, once the clean room is back.
    edit_org(yuko.home, 'write_from = "any-run"', 'write_from = "clean-room"')
    assert yuko("deploy").code == 0
    retried = yuko("candidates", "retry", refused["run_id"], "--json")
    answer = json.loads(retried.stdout)
    assert retried.code == 3, answer
    assert "tainted-run" in json.dumps(answer), answer


def test_an_overlay_cannot_open_the_clean_room(yuko: Cli) -> None:
    overlay = yuko.home / "policy" / "imps" / "yuko.toml"
    overlay.write_text('[knowledge]\nwrite_from = "any-run"\n')
    result = yuko("deploy")
    assert result.code != 0 and "write_from" in result.stderr, result.stderr
