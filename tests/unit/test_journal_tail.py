"""`impyard journal`: the last N events, --since, filters and globs, JSON lines, rotated
files in order, and -f following new lines across rotations."""

from __future__ import annotations

import json
import re
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from impyard.common.names import utc_stamp
from impyard.journal.log import Journal, rotated_numbers, rotated_path
from impyard.journal.query import JournalQuery
from impyard.journal.tail import JournalTail
from impyard.retention.rotation import rotate
from tests.helpers.cli import Cli, json_lines
from tests.helpers.follow import Follower
from tests.helpers.tty import run_on_terminal

EVERYTHING = JournalQuery()


@pytest.fixture
def live(cli: Cli) -> Path:
    assert cli("init").code == 0
    return cli.home / "journal.jsonl"


def write(journal: Journal, start: int, count: int, **fields: Any) -> None:
    for seq in range(start, start + count):
        journal.record("test.line", seq=seq, **fields)


def seqs(entries: list[dict[str, Any]]) -> list[Any]:
    return [e["seq"] for e in entries if e["event"] == "test.line"]


def rotated_history(live: Path) -> Journal:
    """Lines 0-99 in journal.1.jsonl.gz, 100-199 in journal.2.jsonl.gz, 200-229 live."""
    journal = Journal(live)
    live.unlink(missing_ok=True)
    write(journal, 0, 100)
    assert rotate(live, 1) is not None
    write(journal, 100, 100)
    assert rotate(live, 1) is not None
    write(journal, 200, 30)
    return journal


def test_last_n_counts_back_through_rotated_files(cli: Cli, live: Path) -> None:
    rotated_history(live)
    last = cli("journal", "-n", "5", "--json")
    assert last.code == 0, last.stderr
    assert seqs(json_lines(last.stdout)) == list(range(225, 230))
    across = json_lines(cli("journal", "-n", "150", "--json").stdout)
    assert seqs(across) == list(range(80, 230))
    assert seqs(json_lines(cli("journal", "-n", "1000", "--json").stdout)) == list(range(230))
    assert cli("journal", "-n", "0").stdout == ""
    text = cli("journal", "--lines", "2").stdout.splitlines()
    assert len(text) == 2 and "seq=228" in text[0] and "seq=229" in text[1]


def test_last_n_is_read_from_the_live_file_when_it_holds_enough(cli: Cli, live: Path) -> None:
    rotated_history(live)
    # A damaged old rotation is never opened when the live file answers -n.
    rotated_path(live, 1).write_bytes(b"\x1f\x8b not gzip")
    last = cli("journal", "-n", "30", "--json")
    assert last.code == 0, last.stderr
    assert seqs(json_lines(last.stdout)) == list(range(200, 230))


def test_a_whole_journal_reads_rotations_oldest_first(cli: Cli, live: Path) -> None:
    rotated_history(live)
    # A rotation cut short after its rename: journal.3 still plain, read like the others.
    write(Journal(live), 230, 10)
    live.rename(rotated_path(live, 3, compressed=False))
    write(Journal(live), 240, 5)
    shown = cli("journal", "--json")
    assert shown.code == 0, shown.stderr
    assert seqs(json_lines(shown.stdout)) == list(range(245))


def test_filters_and_event_globs(cli: Cli, live: Path) -> None:
    journal = Journal(live)
    journal.record("gateway.request", imp="yuko", run="run-a", status=200)
    journal.record("box.started", imp="yuko", run="run-a")
    journal.record("gateway.refused", imp="pia", run="run-b")
    journal.record("knowledge.integrated", imp="pia", run="run-b")

    def events(*args: str) -> list[str]:
        result = cli("journal", "--json", *args)
        assert result.code == 0, result.stderr
        return [e["event"] for e in json_lines(result.stdout)]

    assert events("--event", "gateway.*") == ["gateway.request", "gateway.refused"]
    assert events("--event", "gateway.*", "--event", "box.started") == [
        "gateway.request",
        "box.started",
        "gateway.refused",
    ]
    assert events("--event", "gateway.*", "--imp", "pia") == ["gateway.refused"]
    assert events("--run", "run-a") == ["gateway.request", "box.started"]
    assert events("--event", "box") == []  # a glob matches the whole name
    assert events("--event", "*.integrated", "-n", "5") == ["knowledge.integrated"]
    assert events("--imp", "yuko", "-n", "1") == ["box.started"]


def write_at(live: Path, *stamps: tuple[str, float]) -> None:
    with live.open("a") as handle:
        for event, epoch in stamps:
            handle.write(json.dumps({"ts": utc_stamp(epoch), "event": event}) + "\n")


def test_since_takes_an_age_or_a_utc_time(cli: Cli, live: Path) -> None:
    now = time.time()
    write_at(live, ("two.days", now - 2 * 86400), ("three.hours", now - 3 * 3600))
    write_at(live, ("five.minutes", now - 300), ("now", now))

    def events(since: str, *args: str) -> list[str]:
        result = cli("journal", "--json", "--since", since, *args)
        assert result.code == 0, result.stderr
        return [e["event"] for e in json_lines(result.stdout)]

    assert events("10m") == ["five.minutes", "now"]
    assert events("4h") == ["three.hours", "five.minutes", "now"]
    assert events("3d") == ["two.days", "three.hours", "five.minutes", "now"]
    assert events("30s") == ["now"]
    assert events("4h", "-n", "1") == ["now"]
    stamp = utc_stamp(now - 300)
    assert events(stamp) == ["five.minutes", "now"]
    whole_second = utc_stamp(int(now - 3 * 3600))[:19]
    assert events(whole_second + "Z") == ["three.hours", "five.minutes", "now"]
    assert events(whole_second + "+00:00") == ["three.hours", "five.minutes", "now"]
    assert events("2001-01-01") == ["two.days", "three.hours", "five.minutes", "now"]
    assert events("2999-01-01T00:00:00Z") == []


@pytest.mark.parametrize(
    "value", ["yesterday", "10", "5x", "-1h", "2024-05-01T12:00:00", "2024-13-01T00:00:00Z"]
)
def test_a_bad_since_is_a_one_line_usage_error(cli: Cli, live: Path, value: str) -> None:
    result = cli("journal", "--since", value)
    assert result.code == 2
    assert result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert f"--since {value!r}" in result.stderr and "Traceback" not in result.stderr


def test_json_lines_and_text_keep_terminal_controls_escaped(cli: Cli, live: Path) -> None:
    journal = Journal(live)
    journal.record("gateway.request", imp="yuko", run="run-a", url="http://x/\x1b]0;pwned\x07")
    journal.record("box.\x1b[2J", imp="\x9bimp\x7f", run="run-\x1b[31m")
    shown = cli("journal", "--json")
    assert [len(line) > 0 for line in shown.stdout.splitlines()] == [True, True]
    first, second = json_lines(shown.stdout)
    assert first["url"] == "http://x/\x1b]0;pwned\x07" and second["imp"] == "\x9bimp\x7f"
    text = cli("journal")
    for output in (shown.stdout, text.stdout):
        assert not any(c in output for c in "\x1b\x07\x9b\x7f"), output
    assert "box.\\x1b[2J imp=\\x9bimp\\x7f run=run-\\x1b[31m" in text.stdout


def test_on_a_terminal_a_long_event_folds_between_words_and_piped_stays_one_line(
    cli: Cli, live: Path
) -> None:
    url = "https://vendors.example.com/catalogue/single-sign-on/pricing?region=eu&plan=team"
    Journal(live).record(
        "gateway.request",
        imp="yuko",
        run="run-20260711T120000Z-0123456789",
        method="GET",
        status=200,
        bytes=48213,
        url=url,
        route="search",
    )
    piped = cli("journal", "--event", "gateway.*").stdout.splitlines()
    assert len(piped) == 1 and len(piped[0]) > 160  # one event, one line, for grep
    shown = run_on_terminal(cli.home, "journal", "--event", "gateway.*", columns=80)
    assert shown.code == 0, shown.stderr
    rows = shown.stdout.splitlines()
    assert len(rows) > 2 and all(len(row) <= 80 for row in rows), rows
    assert all(row.startswith("    ") for row in rows[1:])  # the event's rest, indented
    # Nothing left out, and no word cut: the URL folds only between its parts.
    assert "".join("".join(rows).split()) == "".join(piped[0].split())
    assert set(re.findall(r"\w+", shown.stdout)) == set(re.findall(r"\w+", piped[0]))
    assert "run=run-20260711T120000Z-0123456789" in rows[0].split() + rows[1].split()


def test_poll_waits_for_a_line_to_end(tmp_path: Path) -> None:
    live = tmp_path / "journal.jsonl"
    with JournalTail(live) as tail:  # no journal yet
        assert list(tail.history(EVERYTHING)) == []
        write(Journal(live), 0, 2)
        assert seqs(tail.poll(EVERYTHING)) == [0, 1]
        line = json.dumps({"ts": utc_stamp(0), "event": "test.line", "seq": 2}) + "\n"
        with live.open("a") as handle:
            handle.write(line[:10])
            handle.flush()
            assert tail.poll(EVERYTHING) == []  # a writer mid-append
            handle.write(line[10:])
        assert seqs(tail.poll(EVERYTHING)) == [2]
        assert tail.poll(EVERYTHING) == []


def test_poll_follows_rotations_it_slept_through(tmp_path: Path) -> None:
    live = tmp_path / "journal.jsonl"
    journal = Journal(live)
    write(journal, 0, 10)
    with JournalTail(live) as tail:
        assert seqs(list(tail.history(EVERYTHING, last=3))) == [7, 8, 9]
        write(journal, 10, 5)
        assert rotate(live, 1) is not None  # the held file: read to its end
        assert seqs(tail.poll(EVERYTHING)) == list(range(10, 15))
        write(journal, 15, 5)
        assert rotate(live, 1) is not None
        write(journal, 20, 5)
        assert rotate(live, 1) is not None  # a file the follower never held
        write(journal, 25, 5)
        only_some = JournalQuery(events=("test.*",))
        assert seqs(tail.poll(only_some)) == list(range(15, 30))
        assert rotate(live, 1) is not None  # renamed away, no new live file yet
        assert tail.poll(EVERYTHING) == []
        write(journal, 30, 1)
        assert seqs(tail.poll(EVERYTHING)) == [30]
    assert sorted(p.name for p in tmp_path.iterdir())[:4] == [
        f"journal.{n}.jsonl.gz" for n in range(1, 5)
    ]


def test_lines_landing_as_the_rotation_is_seen_are_read_once(tmp_path: Path) -> None:
    live = tmp_path / "journal.jsonl"
    journal = Journal(live)

    class Racing(JournalTail):
        """Lines are appended and the file rotated just after the held file was read to
        its end, before the follower looks at the name again."""

        def _moved(self) -> bool:
            if not rotated_numbers(live):
                write(journal, 10, 3)
                assert rotate(live, 1) is not None
                write(journal, 13, 2)
            return super()._moved()

    with Racing(live) as tail:
        assert list(tail.history(EVERYTHING)) == []
        write(journal, 0, 10)
        assert seqs(tail.poll(EVERYTHING)) == list(range(15))
        assert tail.poll(EVERYTHING) == []


def test_follow_prints_history_then_new_events_across_rotations(cli: Cli, live: Path) -> None:
    journal = Journal(live)
    write(journal, 0, 50, imp="yuko")
    journal.record("other.event", imp="pia")
    total = 600
    with Follower(cli.home, "journal", "-f", "--json", "-n", "20", "--imp", "yuko") as follower:
        assert seqs(json_lines("\n".join(follower.lines(20)))) == list(range(30, 50))
        stop = threading.Event()

        def rotating() -> None:
            while not stop.is_set():
                rotate(live, 2048)
                time.sleep(0.01)

        def appending() -> None:
            for seq in range(50, total):
                journal.record("test.line", seq=seq, imp="yuko" if seq % 3 else "pia")

        threads = [threading.Thread(target=rotating), threading.Thread(target=appending)]
        for thread in threads:
            thread.start()
        try:
            expected = [seq for seq in range(50, total) if seq % 3]
            got = json_lines("\n".join(follower.lines(len(expected), timeout=60)))
        finally:
            stop.set()
            for thread in threads:
                thread.join()
        assert seqs(got) == expected  # each line once, in order, none dropped
        assert all(e["imp"] == "yuko" for e in got)
        code, err = follower.stop()
    assert code == 0 and err == ""
    assert len([p for p in live.parent.glob("journal.*.jsonl.gz")]) > 3


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_follower_ends_quietly_on_a_signal(cli: Cli, live: Path, signum: int) -> None:
    journal = Journal(live)
    with Follower(cli.home, "journal", "-f", "--event", "test.*") as follower:
        write(journal, 0, 1)
        journal.record("other.event")
        write(journal, 1, 1)
        assert [line.split()[1:] for line in follower.lines(2)] == [
            ["test.line", "imp=-", "run=-", "seq=0"],
            ["test.line", "imp=-", "run=-", "seq=1"],
        ]
        code, err = follower.stop(signum)
    assert code == 0 and err == ""
