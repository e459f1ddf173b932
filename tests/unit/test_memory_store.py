from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

import pytest

from impyard.common.errors import NotFoundError, UsageError
from impyard.home import Home
from impyard.memory import (
    MAX_TEXT_BYTES,
    add_entry,
    forget_entry,
    migrate,
    migrate_all,
    read_memory,
)


def make_imp(root: Path, imp: str = "yuko") -> Home:
    home = Home(root)
    home.repo(imp).mkdir(parents=True, exist_ok=True)
    return home


def memory_path(home: Home, imp: str = "yuko") -> Path:
    return home.memory_dir / f"{imp}.jsonl"


def legacy_path(home: Home, imp: str = "yuko") -> Path:
    return home.legacy_notes_dir / f"{imp}.jsonl"


def write_legacy(home: Home, records: list[dict[str, object]], imp: str = "yuko") -> None:
    home.legacy_notes_dir.mkdir(parents=True, exist_ok=True)
    legacy_path(home, imp).write_text("".join(json.dumps(r) + "\n" for r in records))


def _add_many(root: str, worker: int, count: int) -> list[str]:
    home = Home(Path(root))
    return [
        add_entry(home, "yuko", f"worker {worker} entry {i}", channel=f"c{worker % 3}").entry.id
        for i in range(count)
    ]


def _forget_many(root: str, ids: list[str]) -> None:
    home = Home(Path(root))
    for entry_id in ids:
        forget_entry(home, "yuko", entry_id)


def test_concurrent_adds_from_many_processes_lose_nothing_and_every_line_parses(
    tmp_path: Path,
) -> None:
    home = make_imp(tmp_path)
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(8) as pool:
        results = pool.starmap(_add_many, [(str(tmp_path), w, 25) for w in range(8)])
    added = [entry_id for ids in results for entry_id in ids]
    assert len(set(added)) == 200, "ids must be unique"
    lines = memory_path(home).read_bytes().split(b"\n")
    assert lines[-1] == b""
    parsed = [json.loads(line) for line in lines[:-1]]
    assert len(parsed) == 200
    assert {p["id"] for p in parsed} == set(added)
    assert {p["text"] for p in parsed} == {
        f"worker {w} entry {i}" for w in range(8) for i in range(25)
    }
    read = read_memory(home, "yuko")
    assert read.warnings == ()
    assert len(read.entries) == 200


def test_forget_racing_with_adds_in_other_processes_loses_no_added_line(tmp_path: Path) -> None:
    # forget replaces the file by rename; appenders must never write into the replaced inode.
    home = make_imp(tmp_path)
    old = [add_entry(home, "yuko", f"old {i}").entry.id for i in range(40)]
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(6) as pool:
        adders = [pool.apply_async(_add_many, (str(tmp_path), w, 25)) for w in range(4)]
        forgetters = [pool.apply_async(_forget_many, (str(tmp_path), old[i::2])) for i in range(2)]
        for job in forgetters:
            job.get(timeout=60)
        added = [entry_id for job in adders for entry_id in job.get(timeout=60)]
    read = read_memory(home, "yuko")
    assert read.warnings == ()
    assert sorted(e.id for e in read.entries) == sorted(added)


def test_truncated_last_line_is_skipped_with_a_warning_and_the_next_add_is_intact(
    tmp_path: Path,
) -> None:
    home = make_imp(tmp_path)
    first = add_entry(home, "yuko", "before the crash").entry
    with memory_path(home).open("ab") as handle:
        handle.write(b'{"id": "m_torn", "text": "half wri')
    read = read_memory(home, "yuko")
    assert [e.id for e in read.entries] == [first.id]
    assert len(read.warnings) == 1
    warning = read.warnings[0]
    assert warning.path == memory_path(home)
    assert warning.line == 2
    assert "truncated" in str(warning) and str(memory_path(home)) in str(warning)

    after = add_entry(home, "yuko", "after the crash").entry
    read = read_memory(home, "yuko")
    assert [e.id for e in read.entries] == [first.id, after.id]
    assert [w.line for w in read.warnings] == [2]


def test_unreadable_lines_anywhere_are_reported_not_fatal(tmp_path: Path) -> None:
    home = make_imp(tmp_path)
    home.memory_dir.mkdir(parents=True)
    memory_path(home).write_bytes(
        b'{"id": "m_a", "text": "good"}\n[1, 2]\n{"id": "m_b"}\n'
        b'\xff\xfe\n{"id": "m_c", "text": "also"}\n'
    )
    read = read_memory(home, "yuko")
    assert [e.text for e in read.entries] == ["good", "also"]
    assert [w.line for w in read.warnings] == [2, 3, 4]


def test_text_size_is_bounded_and_kind_is_a_closed_set(tmp_path: Path) -> None:
    home = make_imp(tmp_path)
    assert add_entry(home, "yuko", "é" * (MAX_TEXT_BYTES // 2)).entry.text
    with pytest.raises(UsageError, match="8192 bytes"):
        add_entry(home, "yuko", "é" * (MAX_TEXT_BYTES // 2) + "x")
    with pytest.raises(UsageError, match="empty"):
        add_entry(home, "yuko", "   ")
    with pytest.raises(UsageError, match="kind"):
        add_entry(home, "yuko", "x", kind="secret")
    with pytest.raises(UsageError, match="channel"):
        add_entry(home, "yuko", "x", channel="a\nb")
    for kind in ("note", "fact", "preference", "summary"):
        assert add_entry(home, "yuko", "x", kind=kind).entry.kind == kind
    assert len(read_memory(home, "yuko").entries) == 5


def test_writes_refuse_an_unknown_imp_and_create_nothing(tmp_path: Path) -> None:
    home = make_imp(tmp_path)
    with pytest.raises(NotFoundError, match="ghost"):
        add_entry(home, "ghost", "hello")
    with pytest.raises(UsageError):
        add_entry(home, "../yuko", "hello")
    assert not memory_path(home, "ghost").exists()


def test_stored_entry_carries_every_field(tmp_path: Path) -> None:
    home = make_imp(tmp_path)
    entry = add_entry(home, "yuko", "likes tea", channel="general", user="ann", kind="preference")
    stored = json.loads(memory_path(home).read_text())
    assert stored == {
        "id": entry.entry.id,
        "ts": entry.entry.ts,
        "imp": "yuko",
        "channel": "general",
        "user": "ann",
        "kind": "preference",
        "text": "likes tea",
    }
    assert entry.entry.id.startswith("m_")


def test_forget_removes_exactly_one_entry_and_unknown_id_is_an_error(tmp_path: Path) -> None:
    home = make_imp(tmp_path)
    ids = [add_entry(home, "yuko", f"entry {i}").entry.id for i in range(3)]
    with memory_path(home).open("ab") as handle:
        handle.write(b"not json\n")
    gone = forget_entry(home, "yuko", ids[1])
    assert gone.text == "entry 1"
    read = read_memory(home, "yuko")
    assert [e.id for e in read.entries] == [ids[0], ids[2]]
    assert len(read.warnings) == 1, "forget keeps unreadable lines verbatim"
    with pytest.raises(NotFoundError, match=ids[1]):
        forget_entry(home, "yuko", ids[1])
    assert sorted(p.name for p in home.memory_dir.iterdir()) == [".yuko.lock", "yuko.jsonl"]


def test_reads_fall_back_to_legacy_notes_and_writes_never_touch_them(tmp_path: Path) -> None:
    home = make_imp(tmp_path)
    write_legacy(home, [{"text": "legacy without id", "channel": "general"}, {"text": "two"}])
    before = legacy_path(home).read_bytes()
    read = read_memory(home, "yuko")
    assert read.legacy and read.path == legacy_path(home)
    assert [e.text for e in read.entries] == ["legacy without id", "two"]
    assert [e.kind for e in read.entries] == ["note", "note"]
    derived = read.entries[0].id
    assert read_memory(home, "yuko").entries[0].id == derived, "derived ids are stable"

    added = add_entry(home, "yuko", "new")
    assert added.migration is not None and added.migration.action == "moved"
    assert not legacy_path(home).exists()
    read = read_memory(home, "yuko")
    assert not read.legacy
    assert [e.text for e in read.entries] == ["legacy without id", "two", "new"]
    assert read.entries[0].id == derived
    assert memory_path(home).read_bytes().startswith(before)


def test_forget_on_a_legacy_only_imp_writes_the_result_into_memory(tmp_path: Path) -> None:
    home = make_imp(tmp_path)
    write_legacy(home, [{"id": "old1", "text": "a"}, {"id": "old2", "text": "b"}])
    forget_entry(home, "yuko", "old1")
    assert not legacy_path(home).exists()
    assert [e.id for e in read_memory(home, "yuko").entries] == ["old2"]


def test_migrate_moves_a_legacy_file(tmp_path: Path) -> None:
    home = make_imp(tmp_path)
    write_legacy(home, [{"id": "old1", "text": "a"}, {"text": "no id"}])
    ids = [e.id for e in read_memory(home, "yuko").entries]
    result = migrate(home, "yuko")
    assert (result.action, result.entries, result.duplicates) == ("moved", 2, 0)
    assert not legacy_path(home).exists()
    read = read_memory(home, "yuko")
    assert read.path == memory_path(home)
    assert [e.id for e in read.entries] == ids
    assert migrate(home, "yuko").action == "nothing"


def test_migrate_merges_into_an_existing_memory_file_without_duplicates(tmp_path: Path) -> None:
    home = make_imp(tmp_path)
    kept = add_entry(home, "yuko", "already in memory").entry
    write_legacy(
        home,
        [{"id": "old1", "text": "legacy"}, kept.to_json()],
    )
    with legacy_path(home).open("a") as handle:
        handle.write("garbage line\n")
    assert read_memory(home, "yuko").shadowed_legacy == legacy_path(home)
    result = migrate(home, "yuko")
    assert (result.action, result.entries, result.duplicates, result.unreadable) == (
        "merged",
        1,
        1,
        1,
    )
    read = read_memory(home, "yuko")
    assert [e.id for e in read.entries] == [kept.id, "old1"]
    assert len(read.warnings) == 1, "the unreadable legacy line is kept, and reported"
    # A crash after the merge but before the legacy file is removed: running again is a no-op.
    write_legacy(home, [{"id": "old1", "text": "legacy"}])
    again = migrate(home, "yuko")
    assert (again.action, again.entries, again.duplicates) == ("merged", 0, 1)
    assert [e.id for e in read_memory(home, "yuko").entries] == [kept.id, "old1"]


def test_migrate_all_handles_every_imp_named_file_only(tmp_path: Path) -> None:
    home = make_imp(tmp_path)
    write_legacy(home, [{"text": "a"}], imp="yuko")
    write_legacy(home, [{"text": "b"}], imp="kit")
    (home.legacy_notes_dir / "README.jsonl").write_text("{}\n")
    results = migrate_all(home)
    assert [(r.imp, r.action) for r in results] == [("kit", "moved"), ("yuko", "moved")]
    assert (home.legacy_notes_dir / "README.jsonl").exists()
    assert memory_path(home, "kit").exists()
