"""Journal rotation: past retention.journal_max_bytes gc rotates journal.jsonl to numbered,
compressed files, and every line stays readable, in order, through `impyard journal`."""

from __future__ import annotations

import gzip
import json
import re
import threading
from pathlib import Path

from impyard.dataroot import init_home
from impyard.home import Home
from impyard.journal.log import Journal, read_all, rotated_numbers
from impyard.policy.compile import deploy
from impyard.retention.rotation import rotate, rotation_item
from tests.helpers.cli import Cli, json_lines

NO_ENGINE = {"DOCKER_HOST": "tcp://127.0.0.1:9"}


def limit_journal(home: Home, max_bytes: int) -> None:
    text = home.org_policy.read_text()
    text, count = re.subn(
        r"(?m)^journal_max_bytes = \d+$", f"journal_max_bytes = {max_bytes}", text
    )
    assert count == 1
    home.org_policy.write_text(text)
    deploy(home)


def write(journal: Journal, start: int, count: int) -> None:
    for seq in range(start, start + count):
        journal.record("test.line", seq=seq)


def seqs(entries: list[dict[str, object]]) -> list[object]:
    return [e["seq"] for e in entries if e["event"] == "test.line"]


def test_rotated_lines_stay_readable_in_order(cli: Cli) -> None:
    home = Home(cli.home)
    init_home(home)
    limit_journal(home, 4096)
    journal = Journal(home.journal)
    write(journal, 0, 100)

    dry = cli("gc", "--dry-run", "--json", env=NO_ENGINE)
    (item,) = json.loads(dry.stdout)["items"]
    assert item["kind"] == "journal" and "journal.1.jsonl.gz" in item["reason"]
    assert not (home.root / "journal.1.jsonl.gz").exists()

    first = cli("gc", env=NO_ENGINE)
    assert first.code == 0, first.stderr
    assert "rotated journal" in first.stdout and "gc: 1 rotated" in first.stdout
    write(journal, 100, 100)
    assert cli("gc", env=NO_ENGINE).code == 0
    write(journal, 200, 5)  # under the limit: stays live

    assert sorted(p.name for p in home.root.glob("journal*")) == [
        "journal.1.jsonl.gz",
        "journal.2.jsonl.gz",
        "journal.jsonl",
    ]
    with gzip.open(home.root / "journal.1.jsonl.gz", "rt") as handle:
        assert [json.loads(line)["seq"] for line in handle] == list(range(100))
    shown = cli("journal", "--json")
    assert shown.code == 0, shown.stderr
    entries = json_lines(shown.stdout)
    assert seqs(entries) == list(range(205))
    # Each rotation is noted first thing in the new live file, after all it rotated.
    events = [e["event"] for e in entries]
    assert events.count("journal.rotated") == 2
    assert events.index("journal.rotated") == 100
    rotated = [e for e in entries if e["event"] == "journal.rotated"]
    assert [e["file"] for e in rotated] == ["journal.1.jsonl.gz", "journal.2.jsonl.gz"]
    text = cli("journal")
    assert text.stdout.count("test.line") == 205


def test_appenders_racing_rotations_lose_no_line(tmp_path: Path) -> None:
    live = tmp_path / "journal.jsonl"
    journal = Journal(live)
    writers, per_writer = 4, 300
    stop = threading.Event()

    def append(writer: int) -> None:
        for seq in range(per_writer):
            journal.record("test.line", writer=writer, seq=seq)

    def rotating() -> None:
        while not stop.is_set():
            rotate(live, 1)

    rotator = threading.Thread(target=rotating)
    rotator.start()
    threads = [threading.Thread(target=append, args=(w,)) for w in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    stop.set()
    rotator.join()

    assert len(rotated_numbers(live)) > 1
    entries = read_all(live)
    assert len(entries) == writers * per_writer
    for writer in range(writers):
        assert [e["seq"] for e in entries if e["writer"] == writer] == list(range(per_writer))


def test_a_rotation_cut_short_is_read_and_then_finished(tmp_path: Path) -> None:
    live = tmp_path / "journal.jsonl"
    journal = Journal(live)
    write(journal, 0, 10)
    assert rotate(live, 1) is not None  # journal.1.jsonl.gz, complete
    # Crashed after the rename: journal.2 only as a plain file.
    write(journal, 10, 10)
    live.rename(tmp_path / "journal.2.jsonl")
    # Crashed after the compressed copy got its name, before the plain one went.
    write(journal, 20, 10)
    live.rename(tmp_path / "journal.3.jsonl")
    with (tmp_path / "journal.3.jsonl").open("rb") as src:
        (tmp_path / "journal.3.jsonl.gz").write_bytes(gzip.compress(src.read()))
    # Crashed while compressing.
    (tmp_path / ".journal.2.jsonl.gz.tmp").write_bytes(b"\x1f\x8b torn")
    write(journal, 30, 10)

    assert seqs(read_all(live)) == list(range(40))
    assert rotation_item(live, 1) is not None
    rotation = rotate(live, 1)
    assert rotation is not None and rotation.path.name == "journal.4.jsonl.gz"
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "journal.1.jsonl.gz",
        "journal.2.jsonl.gz",
        "journal.3.jsonl.gz",
        "journal.4.jsonl.gz",
    ]
    assert seqs(read_all(live)) == list(range(40))
    journal.record("test.line", seq=40)
    assert seqs(journal.read()) == list(range(41))


def test_a_journal_under_the_limit_is_left_alone(tmp_path: Path) -> None:
    live = tmp_path / "journal.jsonl"
    assert rotate(live, 10) is None and not live.exists()  # none at all: nothing made
    write(Journal(live), 0, 1)
    size = live.stat().st_size
    assert rotation_item(live, size) is None and rotate(live, size) is None
    assert [p.name for p in tmp_path.iterdir()] == ["journal.jsonl"]
