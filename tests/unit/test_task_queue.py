"""The task queue's claims and endings (what serve's loop writes), on a real database."""

from __future__ import annotations

from pathlib import Path

import pytest

from impyard.queue import tasks
from impyard.queue.db import opened, transaction


def test_a_claim_takes_the_oldest_tasks_up_to_its_limit(tmp_path: Path) -> None:
    with opened(tmp_path / "impyard.db") as conn:
        added = [tasks.add(conn, "ada" if i % 2 else "bob", f"fact {i}").id for i in range(5)]
        with transaction(conn):
            claimed = tasks.claim(conn, 3, set())
        assert [t.id for t in claimed] == added[:3]
        assert all(t.state == "running" and t.started_at for t in claimed)
        with transaction(conn):
            assert [t.id for t in tasks.claim(conn, 9, set())] == added[3:]
        with transaction(conn):
            assert tasks.claim(conn, 9, set()) == []


def test_a_claim_takes_one_reorganize_task_per_imp_and_none_of_a_blocked_imp(
    tmp_path: Path,
) -> None:
    with opened(tmp_path / "impyard.db") as conn:
        first = tasks.add(conn, "ada", "rebuild", reorganize=True).id
        second = tasks.add(conn, "ada", "rebuild again", reorganize=True).id
        blocked = tasks.add(conn, "bob", "rebuild", reorganize=True).id
        append = tasks.add(conn, "ada", "a fact").id
        with transaction(conn):
            claimed = [t.id for t in tasks.claim(conn, 9, {"bob"})]
        assert claimed == [first, append]
        queued = [t.id for t in tasks.list_tasks(conn, "queued")]
        assert queued == [second, blocked]


def test_endings_finish_or_give_back_their_tasks(tmp_path: Path) -> None:
    with opened(tmp_path / "impyard.db") as conn:
        done, failed, back = (tasks.add(conn, "ada", f"fact {i}").id for i in range(3))
        with transaction(conn):
            tasks.claim(conn, 3, set())
        run = "run-20260711T120000Z-0123456789"
        with transaction(conn):
            tasks.record_endings(
                conn,
                [
                    tasks.Ending(done, checkpoint="integrated", run_id=run),
                    tasks.Ending(failed, error="engine error: gone"),
                    tasks.Ending(back, requeue=True),
                ],
            )
        found = {t.id: t for t in tasks.list_tasks(conn)}
    assert (found[done].state, found[done].checkpoint, found[done].run_id) == (
        "done",
        "integrated",
        run,
    )
    assert (found[failed].state, found[failed].error) == ("failed", "engine error: gone")
    assert (found[back].state, found[back].started_at) == ("queued", None)


def test_a_claim_reads_past_a_page_of_passed_over_tasks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tasks, "CLAIM_PAGE", 2)
    with opened(tmp_path / "impyard.db") as conn:
        for i in range(5):
            tasks.add(conn, "bob", f"rebuild {i}", reorganize=True)
        wanted = [tasks.add(conn, "ada", f"fact {i}").id for i in range(3)]
        with transaction(conn):
            assert [t.id for t in tasks.claim(conn, 2, {"bob"})] == wanted[:2]
        with transaction(conn):
            assert tasks.claim(conn, 0, set()) == []
        assert [t.id for t in tasks.list_tasks(conn, "queued") if t.imp == "ada"] == wanted[2:]
