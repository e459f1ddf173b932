"""Deltas in the packs a lane pass writes: each makes its target from its base, git and
libgit2 read them back, and chains of them resolve."""

from __future__ import annotations

import os
from pathlib import Path

import pygit2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from impyard.knowledge.store import packfile
from impyard.knowledge.store.gitdelta import delta
from impyard.knowledge.store.packfile import PackWriter
from impyard.knowledge.store.packs import object_id
from impyard.knowledge.store.staging import MemoryObjects
from tests.helpers.git import git

TREE = pygit2.enums.ObjectType.TREE
BLOB = pygit2.enums.ObjectType.BLOB


def apply_delta(base: bytes, patch: bytes) -> bytes:
    """git's delta format, read independently of the writer."""

    def size(at: int) -> tuple[int, int]:
        value = shift = 0
        while True:
            byte = patch[at]
            at += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return value, at

    source_size, at = size(0)
    target_size, at = size(at)
    assert source_size == len(base)
    out = bytearray()
    while at < len(patch):
        command = patch[at]
        at += 1
        if command & 0x80:
            offset = length = 0
            for i in range(4):
                if command & (1 << i):
                    offset |= patch[at] << (8 * i)
                    at += 1
            for i in range(3):
                if command & (0x10 << i):
                    length |= patch[at] << (8 * i)
                    at += 1
            length = length or 0x10000
            assert length <= 0x10000  # what every git reader accepts
            out += base[offset : offset + length]
        else:
            assert command, "command 0 is reserved"
            out += patch[at : at + command]
            at += command
    assert len(out) == target_size
    return bytes(out)


edits = st.tuples(
    st.binary(max_size=300),
    st.integers(min_value=0, max_value=2000),
    st.integers(min_value=0, max_value=400),
    st.binary(max_size=8),
    st.binary(max_size=300),
)


@settings(max_examples=300, deadline=None)
@given(base=st.binary(max_size=2000), edit=edits, other=st.binary(max_size=400))
def test_a_delta_makes_its_target_from_its_base(
    base: bytes, edit: tuple[bytes, int, int, bytes, bytes], other: bytes
) -> None:
    head, at, cut, inserted, tail = edit
    # An edit in one place, like a tree gaining, losing or replacing an entry ...
    target = head + base[:at] + inserted + base[at + cut :] + tail
    assert apply_delta(base, delta(base, target)) == target
    # ... and anything at all.
    assert apply_delta(base, delta(base, other)) == other


def test_a_delta_of_a_one_entry_change_is_small_even_past_64_kib() -> None:
    base = os.urandom(300_000)
    target = base[:150_000] + b"100644 new\0" + os.urandom(20) + base[150_000:]
    patch = delta(base, target)
    assert apply_delta(base, patch) == target
    assert len(patch) < 100


@pytest.mark.parametrize("large_offsets", [False, True])
def test_chains_of_deltas_in_a_pack_are_read_back_by_git_and_libgit2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, large_offsets: bool
) -> None:
    if large_offsets:
        monkeypatch.setattr(packfile, "_LARGE_OFFSET", 13)
    repo = pygit2.init_repository(str(tmp_path / "r.git"), bare=True, initial_head="main")
    blobs = [os.urandom(20) for _ in range(40)]
    versions: list[bytes] = []
    entries: list[bytes] = []
    for i, blob in enumerate(blobs):
        # A tree gaining one entry per version, as a topic does commit after commit.
        entries.append(b"100644 note-%03d.md\0" % i + object_id(BLOB, blob))
        versions.append(b"".join(entries))
    versions.append(os.urandom(70_000) + versions[-1])  # large, with a copy past 64 KiB
    writer = PackWriter(tmp_path / "r.git" / "objects" / "pack")
    for blob in blobs:
        writer.add(BLOB, blob, object_id(BLOB, blob))
    previous: bytes | None = None
    for version in versions:
        oid = object_id(TREE, version)
        if previous is None:
            writer.add(TREE, version, oid)
        else:
            writer.add_delta(oid, object_id(TREE, previous), delta(previous, version))
        previous = version
    name = writer.finish()

    idx = Path(repo.path) / "objects" / "pack" / f"{name}.idx"
    verified = git("verify-pack", "-v", idx).stdout
    assert f"chain length = {len(versions) - 1}: 1 object" in verified
    for version in versions[:-1]:
        tree = repo[pygit2.Oid(raw=object_id(TREE, version))]
        assert isinstance(tree, pygit2.Tree) and tree.read_raw() == version
    assert repo.odb.read(pygit2.Oid(raw=object_id(TREE, versions[-1])))[1] == versions[-1]


def test_staged_objects_are_written_as_one_pack_with_deltas_only_on_earlier_ones(
    tmp_path: Path,
) -> None:
    repo = pygit2.init_repository(str(tmp_path / "r.git"), bare=True, initial_head="main")
    memory = MemoryObjects()
    first = os.urandom(5_000)
    second = first[:2_500] + b"one more entry" + first[2_500:]
    third = second + b"and another"
    ids = [object_id(BLOB, data) for data in (first, second, third)]
    for oid, data in zip(ids, (first, second, third), strict=True):
        memory.write_cb(pygit2.Oid(raw=oid), data, BLOB)
    memory.based_on(ids[1], ids[0])
    memory.based_on(ids[2], ids[1])
    memory.based_on(ids[0], ids[2])  # a base held but written later: stored whole

    memory.write(repo)

    [idx] = (Path(repo.path) / "objects" / "pack").glob("*.idx")
    verified = git("verify-pack", "-v", idx).stdout
    assert "chain length = 1: 1 object" in verified
    assert "chain length = 2: 1 object" in verified
    for oid, data in zip(ids, (first, second, third), strict=True):
        assert repo.odb.read(pygit2.Oid(raw=oid))[1] == data
    assert len(memory) == 0 and memory.bytes == 0
