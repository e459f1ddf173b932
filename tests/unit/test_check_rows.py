"""``check box`` rows are printed one by one, aligned on names known before any box runs:
piped never cut, on a terminal folded within its width, escaped always."""

from __future__ import annotations

import io

import pytest

from impyard.box.checks.check import row_names
from impyard.box.checks.checkrow import Check
from impyard.cli.setup.check_rows import RowPrinter

TITLE = "impyard check box: impyard-box:latest under runsc"
LONG = "127.0.0.1:3128 answered; no route; refused: " + "a host loopback port; " * 8


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_each_row_is_written_as_it_comes_aligned_and_never_cut_when_piped() -> None:
    out = io.StringIO()
    rows = RowPrinter(TITLE, row_names("runsc"), out)
    assert out.getvalue() == ""  # nothing before the first row: an error line stays alone
    rows.put(Check("filesystem is tmpfs", True, "/tmp is 'tmpfs'"))
    first = out.getvalue().splitlines()
    assert first[0] == TITLE and len(first) == 3
    rows.put(Check("checkout kind (info)", True, "overlay volumes available"))
    rows.put(Check("kernel is gVisor", False, LONG.strip() + "\x1b[2J"))
    header, *lines = out.getvalue().splitlines()[1:]
    column = header.index("result")
    # The longest runsc name sets the column, though its row has not come yet.
    assert column == len("system calls meet gVisor, which is seccomp-filtered (gVisor)") + 2
    assert [line[column:].split()[0] for line in lines] == ["ok", "info", "FAIL"]
    assert lines[2].endswith(LONG.strip() + "\\x1b[2J")


def test_on_a_terminal_names_and_details_fold_within_its_width(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    out = Terminal()
    rows = RowPrinter(TITLE, row_names("runsc"), out)
    rows.put(Check("system calls meet gVisor, which is seccomp-filtered (gVisor)", True, LONG))
    _title, header, *lines = out.getvalue().splitlines()
    assert all(len(line) <= 80 for line in lines), lines
    detail = header.index("detail")
    assert " ".join(line[detail:].strip() for line in lines) == LONG.strip()
    assert lines[0][header.index("result") :].split()[0] == "ok"


def test_on_a_terminal_a_long_path_folds_between_its_parts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    path = "/var/lib/impyard/runs/run-20260711T120000Z-0123456789/checkout/organization/vendors"
    out = Terminal()
    RowPrinter(TITLE, row_names("runsc"), out).put(Check("checkout kind (info)", True, path))
    _title, header, *lines = out.getvalue().splitlines()
    detail = header.index("detail")
    parts = [line[detail:].strip() for line in lines]
    assert len(parts) > 1 and all(len(line) <= 80 for line in lines), lines
    assert "".join(parts) == path
    assert all(part.endswith(("/", "-")) for part in parts[:-1]), parts  # never mid-word
