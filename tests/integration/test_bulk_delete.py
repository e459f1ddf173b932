"""Bulk deletions against the real engine: a reorganize run deleting 25 files waits,
held, for the owner; the approval's preview lists all 25; approval lands once."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.helpers.cli import Cli, run_json
from tests.helpers.git import git

pytestmark = pytest.mark.docker

WRITE = (
    'for n in $(seq 10 34); do echo "# Index $n" > "$IMPYARD_KNOWLEDGE_DIR/organization/t-$n.md"; '
    "done"
)
DELETE = 'rm "$IMPYARD_KNOWLEDGE_DIR"/organization/t-*.md'


def reorganize(cli: Cli, command: str) -> tuple[int, dict[str, Any]]:
    return run_json(cli, command, "--reorganize")


def organization(cli: Cli) -> list[str]:
    repo = cli("knowledge", "yuko").stdout.strip()
    listed = git("-C", repo, "ls-tree", "-r", "--name-only", "main", "organization").stdout
    return [path for path in listed.splitlines() if "/t-" in path]


def test_twenty_five_deletions_wait_for_the_owner_and_land_once_approved(yuko: Cli) -> None:
    cli = yuko
    code, written = reorganize(cli, WRITE)
    assert code == 0 and written["checkpoint"] == "integrated", written
    indexes = organization(cli)
    assert len(indexes) == 25

    code, held = reorganize(cli, DELETE)
    assert code == 3, held
    assert held["reason"] == "held: bulk-delete (25 files)", held
    assert [v["rule"] for v in held["validation_errors"]] == ["bulk-delete"]
    assert organization(cli) == indexes
    listed = cli("candidates", "list").stdout
    assert held["run_id"] in listed and "held" in listed
    assert cli("task", "list", "--json").stdout.strip() == "[]"  # no rework for a hold

    preview = cli("candidates", "approve", held["run_id"], "--dry-run")
    assert preview.code == 0, preview.stderr
    assert [line.split()[-1] for line in preview.stdout.splitlines() if "delete  " in line] == (
        indexes
    )
    assert organization(cli) == indexes

    approved = cli("candidates", "approve", held["run_id"], "--json")
    assert approved.code == 0, approved.stdout + approved.stderr
    assert json.loads(approved.stdout)["deleted"] == indexes
    assert organization(cli) == []
    again = cli("candidates", "approve", held["run_id"])
    assert again.code == 0 and "nothing changed" in again.stdout, again.stdout + again.stderr
    shown = json.loads(cli("runs", "show", held["run_id"], "--json").stdout)
    assert [r["action"] for r in shown["repairs"]] == ["approve"]
