"""A rejected run's automatic rework is queued just after its manifest says rejected: a
host that dies between the two must not lose it, nor queue it twice (no Docker)."""

from __future__ import annotations

from pathlib import Path

from impyard.journal.log import Journal
from impyard.queue import tasks
from impyard.queue.db import opened
from impyard.runs.drive.context import RunContext
from impyard.runs.host.recovery import recover_all
from impyard.runs.provision.rework import POLICY_ACTOR, QUEUED_EVENT
from impyard.runs.records import manifest as manifests
from impyard.settings import load_settings
from tests.helpers.cli import Cli
from tests.helpers.policy import edit_org
from tests.helpers.repo import NS, RUN, make_imp, note_path, note_text
from tests.unit.test_repair import LONG_BODY, deploy, rejected_candidate, set_max_file_chars

LONG_NOTE = note_text(f"{NS}_1", body=LONG_BODY).encode()


def test_recovery_queues_the_rework_a_crash_lost_once(tmp_path: Path) -> None:
    home, repo = make_imp(tmp_path)
    cli = Cli(home=home.root)
    set_max_file_chars(home, 300)
    edit_org(home.root, "rework_attempts = 0", "rework_attempts = 1")
    deploy(cli)
    with opened(home.db) as conn:
        task = tasks.add(conn, "yuko", "Write up what Acme ships.")
        [claimed] = tasks.claim(conn, 1, set())
    assert claimed.id == task.id
    _base, m = rejected_candidate(
        home, repo, {note_path(): note_text(f"{NS}_1", body=LONG_BODY).encode()}
    )
    m.task_id = task.id
    manifests.write(home, m)
    # The host died here: the run's manifest says rejected, its task is still running in
    # the queue, and the rework the policy asks for was never queued.

    ctx = RunContext(settings=load_settings(home.root), journal=Journal(home.journal))
    recover_all(ctx)
    recover_all(ctx)  # a second start finds it queued: never twice

    with opened(home.db) as conn:
        assert tasks.find(conn, task.id).state == "done"  # type: ignore[union-attr]
        [queued] = tasks.reworks_of(conn, RUN)
    assert queued.state == "queued" and queued.imp == "yuko"
    assert queued.prompt == task.prompt
    assert "file-too-large" in str(queued.rework) and note_path() in str(queued.rework)
    [record] = [r for r in manifests.read(home, RUN).repairs if r.action == "rework"]
    assert (record.by, record.outcome, record.detail) == (POLICY_ACTOR, "queued", queued.id)
    events = [e for e in Journal(home.journal).read() if e["event"] == QUEUED_EVENT]
    assert [e["task"] for e in events] == [queued.id]


def test_recovery_queues_no_rework_the_policy_does_not_ask_for(tmp_path: Path) -> None:
    home, repo = make_imp(tmp_path)
    cli = Cli(home=home.root)
    set_max_file_chars(home, 300)
    deploy(cli)  # rework_attempts = 0, the default
    with opened(home.db) as conn:
        task = tasks.add(conn, "yuko", "Write up what Acme ships.")
        tasks.claim(conn, 1, set())
    _base, m = rejected_candidate(
        home, repo, {note_path(): note_text(f"{NS}_1", body=LONG_BODY).encode()}
    )
    m.task_id = task.id
    manifests.write(home, m)

    recover_all(RunContext(settings=load_settings(home.root), journal=Journal(home.journal)))

    with opened(home.db) as conn:
        assert tasks.reworks_of(conn, RUN) == []
        assert tasks.find(conn, task.id).state == "done"  # type: ignore[union-attr]
    assert not [r for r in manifests.read(home, RUN).repairs if r.action == "rework"]
