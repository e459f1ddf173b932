"""The journal's group commit: records made together share one write and one fsync, and
each still returns only once its line is on disk."""

from __future__ import annotations

import os
import threading
import time
from contextlib import AbstractContextManager
from pathlib import Path

import pytest

from impyard import journal_group
from impyard.common.fsutil import locked_append_file
from impyard.journal.log import Journal
from impyard.journal_group import GroupJournal
from impyard.knowledge.integration import lanequeue


def test_records_that_wait_together_are_written_together(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "journal.jsonl"
    fsyncs: list[int] = []
    real_fsync = os.fsync

    def counting_fsync(fd: int) -> None:
        fsyncs.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(journal_group.os, "fsync", counting_fsync)
    appending = threading.Event()
    real_lock = journal_group.locked_append_file

    def announced_lock(target: Path) -> AbstractContextManager[int]:
        appending.set()
        return real_lock(target)

    monkeypatch.setattr(journal_group, "locked_append_file", announced_lock)
    group = GroupJournal(path)
    returned: list[str] = []

    def record(n: int) -> None:
        group.record("run.created", run=f"run-{n}")
        returned.append(f"run-{n}")

    # Another process holds the journal's lock: the first record waits for it with its
    # own line, and the other four queue up behind it meanwhile.
    with locked_append_file(path):
        threads = [threading.Thread(target=record, args=(n,)) for n in range(5)]
        threads[0].start()
        assert appending.wait(10)
        for thread in threads[1:]:
            thread.start()
        deadline = time.monotonic() + 10
        while lanequeue.waiting(("journal", path)) < 4:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert returned == []  # none returns before its line is written and synced
    for thread in threads:
        thread.join(10)
    assert sorted(returned) == [f"run-{n}" for n in range(5)]
    assert len(fsyncs) == 2  # the first line alone, then the four that waited
    entries = Journal(path).read()
    assert sorted(e["run"] for e in entries) == sorted(returned)
    assert all(e["event"] == "run.created" and e["ts"] for e in entries)


def test_a_failed_write_fails_every_record_in_it(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    path.mkdir()  # cannot be appended to
    with pytest.raises(IsADirectoryError):
        GroupJournal(path).record("run.created", run="run-1")


def test_lines_are_whole_and_readable_by_the_plain_journal(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    Journal(path).record("before", n=0)
    group = GroupJournal(path)
    threads = [
        threading.Thread(target=group.record, args=("box.started",), kwargs={"n": n})
        for n in range(1, 41)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    Journal(path).record("after", n=41)
    lines = path.read_bytes().split(b"\n")
    assert lines[-1] == b"" and len(lines) == 43
    entries = Journal(path).read()
    assert (entries[0]["n"], entries[-1]["n"]) == (0, 41)
    assert sorted(e["n"] for e in entries) == list(range(42))
