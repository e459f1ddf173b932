"""Work beside a run's main path: its result or its error reaches the step that joins."""

from __future__ import annotations

import threading

import pytest

from impyard.runs.drive.beside import Beside


def test_the_result_is_what_the_call_returned_on_its_own_thread() -> None:
    work = Beside("t", lambda: threading.current_thread().name)
    assert work.result() == "t"


def test_an_error_is_raised_where_the_work_is_joined() -> None:
    def fail() -> None:
        raise ValueError("volume in use")

    work = Beside("t", fail)
    with pytest.raises(ValueError, match="volume in use"):
        work.result()
