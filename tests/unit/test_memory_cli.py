from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from impyard.home import Home
from impyard.memory import memory_block
from tests.helpers.cli import Cli


@pytest.fixture
def imp_cli(cli: Cli) -> Cli:
    """A data root with one imp, yuko (its canonical repo directory is what makes it exist)."""
    assert cli("init").code == 0
    Home(cli.home).repo("yuko").mkdir(parents=True, exist_ok=True)
    return cli


def memory_file(cli: Cli, imp: str = "yuko") -> Path:
    return cli.home / "memory" / f"{imp}.jsonl"


def legacy_file(cli: Cli, imp: str = "yuko") -> Path:
    return cli.home / "notes" / f"{imp}.jsonl"


def add(cli: Cli, text: str, *options: str) -> str:
    result = cli("memory", "yuko", "add", text, *options)
    assert result.code == 0, result.stderr
    return result.stdout.strip()


def test_add_list_recall_forget_round_trip(imp_cli: Cli) -> None:
    first = add(imp_cli, "Ann prefers short answers", "--channel", "general", "--user", "ann")
    second = add(imp_cli, "Answer in English", "--kind", "preference")
    third = add(imp_cli, "Bob is on holiday", "--channel", "random")
    assert first.startswith("m_") and len({first, second, third}) == 3

    listed = imp_cli("memory", "yuko", "list", "--json")
    assert listed.code == 0
    assert [e["id"] for e in json.loads(listed.stdout)] == [first, second, third]
    only_general = json.loads(
        imp_cli("memory", "yuko", "list", "--channel", "general", "--json").stdout
    )
    assert [e["id"] for e in only_general] == [first]
    human = imp_cli("memory", "yuko", "list").stdout
    assert "Ann prefers short answers" in human and third in human

    recalled = json.loads(
        imp_cli("memory", "yuko", "recall", "--channel", "general", "--json").stdout
    )
    assert [e["id"] for e in recalled] == [first, second]
    assert (
        json.loads(
            imp_cli("memory", "yuko", "recall", "--channel", "general", "ENGLISH", "--json").stdout
        )[0]["id"]
        == second
    )
    limited = imp_cli("memory", "yuko", "recall", "--channel", "general", "--limit", "1", "--json")
    assert [e["id"] for e in json.loads(limited.stdout)] == [first]

    forgot = imp_cli("memory", "yuko", "forget", first)
    assert forgot.code == 0 and first in forgot.stdout
    assert first not in imp_cli("memory", "yuko", "list").stdout
    again = imp_cli("memory", "yuko", "forget", first)
    assert again.code != 0
    assert first in again.stderr and "Traceback" not in again.stderr


def test_recall_block_is_exactly_what_a_run_receives(imp_cli: Cli) -> None:
    add(imp_cli, "imp-wide", "--kind", "fact")
    add(imp_cli, "channel one", "--channel", "general")
    add(imp_cli, "elsewhere", "--channel", "random")
    result = imp_cli("memory", "yuko", "recall", "--channel", "general", "--block")
    assert result.code == 0
    assert result.stdout == memory_block(Home(imp_cli.home), "yuko", "general")
    assert "channel one" in result.stdout and "elsewhere" not in result.stdout


def test_add_json_and_validation_errors(imp_cli: Cli) -> None:
    result = imp_cli("memory", "yuko", "add", "hello", "--user", "ann", "--json")
    assert result.code == 0
    entry = json.loads(result.stdout)
    assert set(entry) == {"id", "ts", "imp", "channel", "user", "kind", "text"}
    assert (entry["imp"], entry["user"], entry["kind"], entry["channel"]) == (
        "yuko",
        "ann",
        "note",
        None,
    )
    too_big = imp_cli("memory", "yuko", "add", "x" * 8193)
    assert too_big.code == 2 and "8192" in too_big.stderr
    bad_kind = imp_cli("memory", "yuko", "add", "x", "--kind", "gossip")
    assert bad_kind.code == 2 and "note, fact, preference, summary" in bad_kind.stderr
    ghost = imp_cli("memory", "ghost", "list")
    assert ghost.code == 2 and "ghost" in ghost.stderr
    assert len(memory_file(imp_cli).read_text().splitlines()) == 1


def test_concurrent_cli_adds_lose_nothing(imp_cli: Cli) -> None:
    env = {k: v for k, v in os.environ.items() if k != "IMPYARD_HOME"}
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "impyard",
                "--home",
                str(imp_cli.home),
                "memory",
                "yuko",
                "add",
                f"p{n}",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for n in range(12)
    ]
    ids = []
    for proc in procs:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        ids.append(out.strip())
    stored = [json.loads(line) for line in memory_file(imp_cli).read_text().splitlines()]
    assert sorted(e["id"] for e in stored) == sorted(ids)
    assert sorted(e["text"] for e in stored) == sorted(f"p{n}" for n in range(12))


def test_truncated_last_line_warns_on_stderr_and_exits_zero(imp_cli: Cli) -> None:
    kept = add(imp_cli, "survives the crash")
    with memory_file(imp_cli).open("ab") as handle:
        handle.write(b'{"id": "m_torn", "text": "cut sh')
    for command in (("list",), ("recall",), ("recall", "--block")):
        result = imp_cli("memory", "yuko", *command)
        assert result.code == 0, result.stderr
        assert f"{memory_file(imp_cli)}:2:" in result.stderr
        assert "truncated" in result.stderr
        assert "survives the crash" in result.stdout
        assert "cut sh" not in result.stdout
    later = add(imp_cli, "written after the crash")
    listed = json.loads(imp_cli("memory", "yuko", "list", "--json").stdout)
    assert [e["id"] for e in listed] == [kept, later]


def write_legacy(cli: Cli, lines: list[dict[str, object]]) -> None:
    legacy_file(cli).parent.mkdir(parents=True, exist_ok=True)
    legacy_file(cli).write_text("".join(json.dumps(line) + "\n" for line in lines))


def test_notes_alias_reads_a_legacy_file_with_a_hint_and_refuses_writes(imp_cli: Cli) -> None:
    write_legacy(
        imp_cli,
        [
            {"id": "n1", "ts": "2025-01-01T00:00:00Z", "channel": "general", "text": "legacy one"},
            {"ts": "2025-01-02T00:00:00Z", "text": "legacy two, no id"},
        ],
    )
    before = legacy_file(imp_cli).read_bytes()

    listed = imp_cli("notes", "yuko", "list")
    assert listed.code == 0, listed.stderr
    assert "legacy one" in listed.stdout and "legacy two, no id" in listed.stdout
    hints = [line for line in listed.stderr.splitlines() if "deprecated" in line]
    assert len(hints) == 1 and "impyard memory" in hints[0]

    recalled = imp_cli("notes", "yuko", "recall", "--channel", "general", "--json")
    assert recalled.code == 0
    assert [e["text"] for e in json.loads(recalled.stdout)] == ["legacy one", "legacy two, no id"]
    assert "deprecated" in recalled.stderr

    # `impyard memory` reads the legacy file too, while memory/ has none.
    assert "legacy one" in imp_cli("memory", "yuko", "list").stdout

    for write in (("add", "new"), ("forget", "n1")):
        refused = imp_cli("notes", "yuko", *write)
        assert refused.code != 0
        assert f"impyard memory yuko {write[0]}" in refused.stderr
    refused = imp_cli("notes", "migrate")
    assert refused.code != 0 and "impyard memory migrate" in refused.stderr
    assert legacy_file(imp_cli).read_bytes() == before
    assert not memory_file(imp_cli).exists()


def test_migrate_moves_a_legacy_file(imp_cli: Cli) -> None:
    write_legacy(imp_cli, [{"id": "n1", "text": "from the old days"}, {"text": "no id"}])
    ids = [e["id"] for e in json.loads(imp_cli("memory", "yuko", "list", "--json").stdout)]

    result = imp_cli("memory", "migrate", "yuko")
    assert result.code == 0, result.stderr
    assert "moved 2" in result.stdout
    assert not legacy_file(imp_cli).exists()
    assert memory_file(imp_cli).is_file()
    listed = imp_cli("memory", "yuko", "list", "--json")
    assert [e["id"] for e in json.loads(listed.stdout)] == ids
    assert "legacy" not in listed.stderr

    again = imp_cli("memory", "migrate", "--json")
    assert again.code == 0 and json.loads(again.stdout) == []


def test_migrate_merges_instead_of_clobbering(imp_cli: Cli) -> None:
    mine = add(imp_cli, "already in memory")
    write_legacy(imp_cli, [{"id": "n1", "text": "legacy"}])
    shadowed = imp_cli("memory", "yuko", "list")
    assert "legacy" not in shadowed.stdout and "migrate" in shadowed.stderr
    result = imp_cli("memory", "migrate", "--json")
    assert json.loads(result.stdout) == [
        {"imp": "yuko", "action": "merged", "entries": 1, "duplicates": 0, "unreadable": 0}
    ]
    listed = json.loads(imp_cli("memory", "yuko", "list", "--json").stdout)
    assert [e["id"] for e in listed] == [mine, "n1"]


def test_an_imp_named_migrate_is_still_reachable(imp_cli: Cli) -> None:
    Home(imp_cli.home).repo("migrate").mkdir(parents=True)
    added = imp_cli("memory", "migrate", "add", "hello")
    assert added.code == 0, added.stderr
    listed = imp_cli("memory", "migrate", "list")
    assert listed.code == 0 and "hello" in listed.stdout
