from __future__ import annotations

import threading
from pathlib import Path

from impyard.gateway.guard.budget import DailyCounter, RunBudget
from impyard.home import Home
from impyard.policy.models import GatewayBudget


def test_requests_per_run(tmp_path: Path) -> None:
    budget = RunBudget(GatewayBudget(requests_per_run=3), DailyCounter(Home(tmp_path), "yuko"))
    assert [budget.admit() for _ in range(3)] == [None, None, None]
    refusal = budget.admit()
    assert refusal is not None and refusal.status == 429
    assert refusal.rule == "gateway.budget.requests_per_run" and "3 requests" in refusal.reason


def test_response_bytes_per_run(tmp_path: Path) -> None:
    budget = RunBudget(
        GatewayBudget(response_bytes_per_run=100), DailyCounter(Home(tmp_path), "yuko")
    )
    assert budget.admit() is None
    assert budget.take_bytes(60) == 60
    assert budget.take_bytes(60) == 40  # what is left, not a byte more
    assert budget.take_bytes(1) == 0 and budget.response_bytes == 100
    refusal = budget.admit()
    assert refusal is not None and refusal.rule == "gateway.budget.response_bytes_per_run"


def test_request_bytes_per_run_grant_what_is_left(tmp_path: Path) -> None:
    budget = RunBudget(
        GatewayBudget(request_bytes_per_run=100), DailyCounter(Home(tmp_path), "yuko")
    )
    assert budget.take_request_bytes(70) == 70
    assert budget.take_request_bytes(70) == 30
    assert budget.take_request_bytes(1) == 0 and budget.request_bytes == 100


def test_daily_counter_persists_across_runs_and_days(tmp_path: Path) -> None:
    home = Home(tmp_path)
    day = ["2026-07-11"]
    first = RunBudget(
        GatewayBudget(requests_per_imp_per_day=3), DailyCounter(home, "yuko", today=lambda: day[0])
    )
    assert first.admit() is None and first.admit() is None
    second = RunBudget(
        GatewayBudget(requests_per_imp_per_day=3), DailyCounter(home, "yuko", today=lambda: day[0])
    )
    assert second.admit() is None
    refusal = second.admit()
    assert refusal is not None and refusal.rule == "gateway.budget.requests_per_imp_per_day"
    assert home.gateway_day_count("yuko", "2026-07-11").read_text() == "3\n"
    other_imp = RunBudget(GatewayBudget(requests_per_imp_per_day=3), DailyCounter(home, "ada"))
    assert other_imp.admit() is None
    day[0] = "2026-07-12"
    assert second.admit() is None


def test_daily_counter_is_exact_under_concurrency(tmp_path: Path) -> None:
    home = Home(tmp_path)
    granted: list[bool] = []
    lock = threading.Lock()

    def take() -> None:
        # Separate counter objects, as separate runs/processes would have.
        ok = DailyCounter(home, "yuko", today=lambda: "2026-07-11").take(25)
        with lock:
            granted.append(ok)

    threads = [threading.Thread(target=take) for _ in range(40)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert granted.count(True) == 25 and granted.count(False) == 15
    assert DailyCounter(home, "yuko", today=lambda: "2026-07-11").read() == 25
