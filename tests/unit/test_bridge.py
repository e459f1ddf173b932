"""The bridge out of a tainted run: what ``impyard-task`` files, and every reason it
refuses (a clean run, a prompt too long, empty or with control characters, a participant
named, a fourth task)."""

from __future__ import annotations

from pathlib import Path

import pytest

from impyard.home import Home
from impyard.memory import add_entry
from impyard.queue import tasks
from impyard.queue.db import opened
from impyard.runs.checkpoints.bridge import MAX_PROMPT_CHARS, MAX_TASKS_PER_RUN, file_task
from impyard.runs.provision.taint import taint_channel
from impyard.runs.records import manifest as manifests
from impyard.runs.records.model import Manifest

RUN = "run-20260101T000000Z-0123456789"


@pytest.fixture
def home(tmp_path: Path) -> Home:
    home = Home(tmp_path)
    home.repo("yuko").mkdir(parents=True)
    add_entry(home, "yuko", "wants the SSO report, mail ada@example.com", channel="support")
    add_entry(home, "yuko", "asked about pricing", channel="support", user="Bea Quill")
    return home


def run(*, tainted: bool = True, channel: str | None = "support", **fields: object) -> Manifest:
    return Manifest(
        run_id=fields.pop("run_id", RUN),
        imp="yuko",
        task_id=None,
        channel=channel,
        mode="append",
        base_commit="0" * 40,
        namespace="r0123456789",
        tainted=tainted,
        taint="carries a channel" if tainted else None,
        **fields,
    )


def test_a_tainted_run_files_a_clean_task_for_its_imp(home: Home) -> None:
    filed = file_task(home, run(), b"Research Acme's SSO pricing page and record its tiers.")
    assert filed.task_id is not None and filed.reasons == ()
    with opened(home.db) as conn:
        task = tasks.get(conn, filed.task_id)
    assert (task.imp, task.channel, task.state, task.filed_by) == ("yuko", None, "queued", RUN)
    assert task.prompt == "Research Acme's SSO pricing page and record its tiers."


def test_a_clean_run_files_nothing(home: Home) -> None:
    filed = file_task(home, run(tainted=False, channel=None), b"Research Acme.")
    assert filed.task_id is None
    assert "carries no conversation content" in filed.reasons[0]


def test_a_prompt_naming_a_participant_is_refused_saying_what_kind_of_name(home: Home) -> None:
    filed = file_task(home, run(), b"Send the SSO report to ADA@example.com and bea quill")
    assert filed.task_id is None
    assert filed.reasons == (
        "names a conversation participant; that belongs in memory (display name, email address)",
    )
    assert filed.named == ("display name", "email address")
    with opened(home.db) as conn:
        assert tasks.list_tasks(conn) == []


def test_every_reason_is_listed_at_once(home: Home) -> None:
    too_long = ("x" * MAX_PROMPT_CHARS + "\x07 bea quill").encode()
    filed = file_task(home, run(tainted=False), too_long)
    assert len(filed.reasons) == 3  # clean run, too long, control characters (no scan: clean)
    assert f"at most {MAX_PROMPT_CHARS}" in filed.reasons[1]
    assert "control characters" in filed.reasons[2]
    assert file_task(home, run(), b" \n ").reasons == ("the prompt is empty",)
    assert file_task(home, run(), b"\xff\xfe").reasons == ("the prompt is not UTF-8 text",)


def test_a_run_files_at_most_its_share_of_tasks(home: Home) -> None:
    for n in range(MAX_TASKS_PER_RUN):
        assert file_task(home, run(), f"Research topic {n}.".encode()).task_id is not None
    refused = file_task(home, run(), b"Research one more topic.")
    assert refused.task_id is None
    assert refused.reasons == (f"this run filed {MAX_TASKS_PER_RUN} tasks already, the most",)
    # Another run's share is its own.
    other = run(run_id="run-20260101T000001Z-abcdefabcd")
    assert file_task(home, other, b"Research one more topic.").task_id is not None


def test_a_rework_is_scanned_against_the_channel_its_chain_started_in(home: Home) -> None:
    first = run(run_id="run-20260101T000001Z-abcdefabcd")
    home.run_dir(first.run_id).mkdir(parents=True)
    manifests.write(home, first)
    rework = run(channel=None, rework_of=first.run_id)
    assert taint_channel(home, rework) == "support"
    assert file_task(home, rework, b"ask Bea Quill").task_id is None
