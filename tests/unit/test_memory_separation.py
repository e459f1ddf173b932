"""Knowledge never reaches interaction memory (SPEC: "Interaction memory remains separate").

A unique marker is planted everywhere knowledge lives — the canonical repo (as a
real commit), the published origin, many runs' checkouts — including decoy files
shaped exactly like memory files. It must never show up in a Memory block or in
the output of any memory command.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from impyard.home import Home
from impyard.memory import add_entry, forget_entry, memory_block, migrate_all, read_memory
from tests.helpers.cli import Cli
from tests.helpers.git import git

MARKER = "KNOWLEDGE-MARKER-7f3c91a2d0e4-never-in-memory"
CHANNELS = [None, "general", "random", "records", "knowledge"]


def decoy_memory_line(imp: str, channel: str | None) -> str:
    return (
        json.dumps(
            {
                "id": "m_decoy",
                "ts": "2099-01-01T00:00:00Z",
                "imp": imp,
                "channel": channel,
                "user": None,
                "kind": "fact",
                "text": MARKER,
            }
        )
        + "\n"
    )


def plant_knowledge(home: Home, imp: str, tmp: Path, runs: int = 30) -> None:
    work = tmp / "work"
    work.mkdir()
    git("init", "-q", "-b", "main", work)
    record = work / "records" / "vendors" / "acme--n_7f3c91a2d0e4_1.md"
    record.parent.mkdir(parents=True)
    record.write_text(f"---\nid: n_7f3c91a2d0e4_1\n---\n{MARKER}\n")
    (work / "memory").mkdir()
    (work / "memory" / f"{imp}.jsonl").write_text(decoy_memory_line(imp, "general"))
    git("-C", work, "add", "-A")
    git("-C", work, "commit", "-q", "-m", f"record {MARKER}")
    home.repo(imp).parent.mkdir(parents=True, exist_ok=True)
    git("clone", "-q", "--bare", work, home.repo(imp))
    git("clone", "-q", "--bare", work, home.origin(imp))
    for n in range(runs):
        run = home.run_dir(f"run-20260711T1200{n:02d}Z-{n:010x}")
        checkout = run / "knowledge"
        for sub in ("records/vendors", "organization", "memory", "notes"):
            (checkout / sub).mkdir(parents=True)
        (checkout / "records" / "vendors" / f"x--n_{n:012x}_1.md").write_text(MARKER)
        (checkout / "organization" / "index.md").write_text(MARKER)
        (checkout / "memory" / f"{imp}.jsonl").write_text(decoy_memory_line(imp, "general"))
        (checkout / "notes" / f"{imp}.jsonl").write_text(decoy_memory_line(imp, None))
        (run / "task.md").write_text(f"## Memory\n\n- {MARKER}\n")
        (run / "box.log").write_text(MARKER)


@pytest.fixture
def planted(cli: Cli, tmp_path: Path) -> Cli:
    assert cli("init").code == 0
    home = Home(cli.home)
    plant_knowledge(home, "yuko", tmp_path)
    for channel in ("general", "random", None):
        add_entry(home, "yuko", f"remembered in {channel}", channel=channel)
    return cli


def test_marker_never_appears_in_a_memory_block(planted: Cli) -> None:
    home = Home(planted.home)
    for channel in CHANNELS:
        for max_chars in (200, 4000, 100_000):
            block = memory_block(home, "yuko", channel, max_chars=max_chars, limit=1000)
            assert MARKER not in block
    assert "remembered in general" in memory_block(home, "yuko", "general")


def test_marker_never_appears_in_any_memory_command_output(planted: Cli) -> None:
    commands: list[tuple[str, ...]] = [
        ("memory", "yuko", "add", "one more", "--channel", "general")
    ]
    for prefix in (("memory", "yuko"), ("notes", "yuko")):
        commands += [(*prefix, "list", "--json"), (*prefix, "recall", "never")]
        for channel in CHANNELS:
            where = ("--channel", channel) if channel else ()
            commands.append((*prefix, "recall", *where, "--json", "--limit", "1000"))
    for channel in ("general", "records"):
        commands.append(("memory", "yuko", "recall", "--channel", channel, "--block"))
    commands.append(("memory", "yuko", "list"))
    commands += [("memory", "migrate"), ("memory", "migrate", "--json")]
    for command in commands:
        result = planted(*command)
        assert result.code == 0, (command, result.stderr)
        assert MARKER not in result.stdout + result.stderr, command
    listed = json.loads(planted("memory", "yuko", "list", "--json").stdout)
    assert len(listed) == 4


@contextmanager
def file_accesses() -> Iterator[list[str]]:
    """Every path opened, listed or renamed by this process while inside the block."""
    seen: list[str] = []
    state = {"on": True}

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if state["on"] and event in {"open", "os.listdir", "os.scandir", "os.rename", "os.remove"}:
            path = args[0] if args else None
            if isinstance(path, (str, bytes, Path)):
                seen.append(str(Path(path.decode() if isinstance(path, bytes) else path).resolve()))

    # Audit hooks cannot be removed; this one goes quiet when the block ends.
    sys.addaudithook(hook)
    try:
        yield seen
    finally:
        state["on"] = False


def test_memory_code_touches_only_memory_and_legacy_notes(planted: Cli) -> None:
    home = Home(planted.home)
    home.legacy_notes_dir.mkdir(exist_ok=True)
    (home.legacy_notes_dir / "kit.jsonl").write_text('{"text": "legacy kit"}\n')
    home.repo("kit").mkdir(parents=True)
    memory_block(home, "yuko", "general")  # warm up lazy imports outside the window
    allowed = (str(home.memory_dir.resolve()), str(home.legacy_notes_dir.resolve()))
    with file_accesses() as seen:
        for channel in CHANNELS:
            memory_block(home, "yuko", channel)
        read_memory(home, "kit")
        entry = add_entry(home, "yuko", "touch", channel="general").entry
        forget_entry(home, "yuko", entry.id)
        migrate_all(home)
    assert seen, "the hook saw the memory files being read"
    outside = [path for path in seen if not path.startswith(allowed)]
    assert outside == []
