"""The published origin and the canonical repository stay small in files: loose objects
and small packs are folded into one pack once enough gathered, and a ready box's copy of
the origin stays whole while the lane folds."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pygit2
import pytest

from impyard.home import Home
from impyard.knowledge.change import FileState
from impyard.knowledge.integration import lane
from impyard.knowledge.integration.origin import publish_origin
from impyard.knowledge.store import fold
from impyard.knowledge.store.fold import roll_up
from impyard.knowledge.store.gitdelta import delta
from impyard.knowledge.store.packfile import PackCopyError, PackWriter
from impyard.knowledge.store.packs import ObjectBatch, object_id
from impyard.knowledge.store.repo import main_commit
from impyard.knowledge.store.trees import build_tree
from impyard.runs.ready.claim import _link_origin
from tests.helpers import repo as knowledge
from tests.helpers.git import git
from tests.helpers.repo import assert_fsck_clean, make_imp, namespace, run_id


def commit_note(repo: pygit2.Repository, n: int) -> str:
    blob = repo.create_blob(f"note {n}\n".encode())
    head = repo[main_commit(repo)]
    tree = build_tree(repo, head.tree, {f"records/t/n{n}.md": FileState(str(blob), 2, False)}, ())
    sig = pygit2.Signature("t", "t@t")
    return str(repo.create_commit("refs/heads/main", sig, sig, f"n{n}\n", tree, [head.id]))


def loose_files(git_dir: Path) -> list[str]:
    objects = git_dir / "objects"
    return [
        f"{d}/{f}"
        for d in os.listdir(objects)
        if len(d) == 2 and (objects / d).is_dir()
        for f in os.listdir(objects / d)
    ]


def packs(git_dir: Path) -> list[str]:
    return sorted(n for n in os.listdir(git_dir / "objects" / "pack") if n.endswith(".idx"))


def publish_runs(home: Home, repo: pygit2.Repository, first: int, count: int) -> None:
    for n in range(first, first + count):
        commit_note(repo, n)
        publish_origin(home, "yuko")


def test_many_one_note_runs_leave_a_bounded_number_of_loose_objects(tmp_path: Path) -> None:
    home, repo = make_imp(tmp_path)
    origin = home.origin("yuko")
    most_loose_dirs = 0
    for n in range(120):
        commit_note(repo, n)
        publish_origin(home, "yuko")
        dirs = {name.split("/")[0] for name in loose_files(origin)}
        most_loose_dirs = max(most_loose_dirs, len(dirs))
    # Four objects a run (commit, two trees, a blob): 480 loose files without folding.
    assert most_loose_dirs < fold.LOOSE_DIRS
    assert len(loose_files(origin)) < 4 * fold.LOOSE_DIRS
    assert 1 <= len(packs(origin)) <= 2  # folds fold their predecessor in while small
    assert_fsck_clean(origin)
    assert git("-C", origin, "rev-parse", "main").stdout.strip() == main_commit(repo)
    clone = tmp_path / "clone"
    git("clone", "-q", origin, clone)
    assert sorted(p.name for p in (clone / "records" / "t").iterdir()) == sorted(
        f"n{n}.md" for n in range(120)
    )


def test_a_fold_takes_the_smallest_packs_geometrically() -> None:
    def packs(*sizes: int) -> list[tuple[Path, int]]:
        return [(Path(f"pack-{i}.idx"), size) for i, size in enumerate(sizes)]

    # Loose objects take each next pack while it is under twice what the fold holds.
    assert roll_up(100, packs(10_000, 50, 400, 120)) == [
        Path("pack-1.idx"),
        Path("pack-3.idx"),
        Path("pack-2.idx"),
    ]
    # Packs that already double leave nothing to fold but the loose objects.
    assert roll_up(100, packs(1_000, 3_000)) == []
    assert roll_up(0, packs(1_000, 3_000)) == []
    # Everything at or below the highest place the sizes stop doubling: a tiny first
    # pack does not keep the run of similar ones above it from folding.
    assert roll_up(0, packs(6_000, 1_000, 1_500)) == [Path("pack-1.idx"), Path("pack-2.idx")]
    similar = packs(1_700, *[30_000 + i for i in range(20)], 12_000_000)
    assert roll_up(0, similar) == [index for index, _ in similar[:21]]


def test_packs_stay_few_and_a_large_one_is_never_rewritten(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fold, "FOLD_CAP", 1 << 20)
    home, repo = make_imp(tmp_path)
    origin = home.origin("yuko")
    publish_runs(home, repo, 0, 10)
    # A large pack in the origin (a big run's snapshot, linked from the canonical repo).
    with ObjectBatch(pygit2.Repository(str(origin)), threshold=2) as batch:
        for i in range(40):
            batch.add(pygit2.enums.ObjectType.BLOB, os.urandom(40_000) + bytes([i]))
        large = batch.write()
    assert large is not None
    large_inode = (origin / "objects" / "pack" / f"{large}.pack").stat().st_ino
    most_packs = 0
    for n in range(10, 250):
        commit_note(repo, n)
        publish_origin(home, "yuko")
        most_packs = max(most_packs, len(packs(origin)))
    assert (origin / "objects" / "pack" / f"{large}.pack").stat().st_ino == large_inode
    assert most_packs <= 8  # the large one and a few that double in size
    assert len(loose_files(origin)) < 4 * fold.LOOSE_DIRS
    assert_fsck_clean(origin)


def test_a_copy_made_while_the_lane_folds_is_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The claim links refs, then loose objects, then packs: objects folded away between
    the loose listing and the pack listing are found in the new pack."""
    home, repo = make_imp(tmp_path)
    origin = home.origin("yuko")
    publish_runs(home, repo, 0, 12)
    assert loose_files(origin)
    copy = tmp_path / "copy"
    copy.mkdir()
    real_link = os.link
    folded: list[object] = []

    def link_then_fold(src: str, dst: str, *, follow_symlinks: bool = True) -> None:
        # The first loose object linked: the lane folds everything before the next one.
        real_link(src, dst, follow_symlinks=follow_symlinks)
        if not folded and "/objects/" in src and "/pack/" not in src:
            with monkeypatch.context() as fold_now:
                fold_now.setattr(fold, "LOOSE_DIRS", 1)
                folded.append(fold.fold_objects(pygit2.Repository(str(origin))))

    monkeypatch.setattr(os, "link", link_then_fold)
    _link_origin(origin, copy)
    monkeypatch.undo()
    assert folded and folded[0] is not None
    assert not loose_files(origin)
    assert_fsck_clean(copy)
    assert git("-C", copy, "rev-parse", "main").stdout.strip() == main_commit(repo)


def test_a_fold_that_fails_leaves_the_publication_and_every_object(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home, repo = make_imp(tmp_path)
    origin = home.origin("yuko")
    monkeypatch.setattr(fold, "LOOSE_DIRS", 1)
    real_write = fold._write_pack

    def short_pack(repository: pygit2.Repository, rolled: list[Path], loose: list[bytes]) -> str:
        return real_write(repository, [], loose[:1])  # a pack missing all but one object

    monkeypatch.setattr(fold, "_write_pack", short_pack)
    loose_before = set(loose_files(origin))
    head = commit_note(repo, 1)
    assert publish_origin(home, "yuko") == head  # published though the fold refused
    assert git("-C", origin, "rev-parse", "main").stdout.strip() == head
    assert loose_before <= set(loose_files(origin))  # nothing it replaced was deleted
    assert_fsck_clean(origin)


def delta_packs(origin: Path) -> tuple[dict[bytes, bytes], list[str]]:
    """Two packs of similar size in ``origin``, as the lane writes them: a chain of deltas,
    an object in both (whole in one, a delta in the other) and a delta whose base is that
    shared object. Returns every object's content by id, and the two packs' names."""
    blob = pygit2.enums.ObjectType.BLOB
    b0 = os.urandom(20_000)
    b1, b2, b3, c0 = b0 + b"one", b0 + b"one two", b0 + b"one three", os.urandom(20_000)
    ids = {data: object_id(blob, data) for data in (b0, b1, b2, b3, c0)}
    first = PackWriter(origin / "objects" / "pack")
    first.add(blob, b0, ids[b0])
    first.add_delta(ids[b1], ids[b0], delta(b0, b1))
    first.add_delta(ids[b2], ids[b1], delta(b1, b2))
    second = PackWriter(origin / "objects" / "pack")
    second.add(blob, c0, ids[c0])
    second.add(blob, b1, ids[b1])
    second.add_delta(ids[b3], ids[b1], delta(b1, b3))
    return {oid: data for data, oid in ids.items()}, [first.finish(), second.finish()]


def test_a_fold_copies_packed_objects_as_stored_and_keeps_their_deltas(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home, _ = make_imp(tmp_path)
    origin = home.origin("yuko")
    contents, names = delta_packs(origin)
    pack_dir = origin / "objects" / "pack"
    before = sum((pack_dir / f"{name}.pack").stat().st_size for name in names)
    monkeypatch.setattr(fold, "MAX_PACKS", 2)
    folded = fold.fold_objects(pygit2.Repository(str(origin)))
    assert folded is not None and folded.packs == 2, folded
    assert packs(origin) == [f"{folded.pack}.idx"]
    fresh = pygit2.Repository(str(origin))
    for oid, data in contents.items():
        assert fresh[pygit2.Oid(raw=oid)].data == data
    # Whole, the three versions of b0 alone would be 60 KB more than the packs held.
    assert (pack_dir / f"{folded.pack}.pack").stat().st_size <= before
    shown = git("verify-pack", "-v", pack_dir / f"{folded.pack}.idx").stdout
    # b1 on b0; b2 and b3 on b1 (b3's base came from the other pack): still deltas.
    assert "chain length = 1: 1 object\n" in shown, shown
    assert "chain length = 2: 2 objects\n" in shown, shown
    assert_fsck_clean(origin)


def _flip_a_byte(raw: bytes) -> bytes:
    flipped = bytearray(raw)
    flipped[100] ^= 0xFF  # inside the first object's compressed data
    return bytes(flipped)


def _cut_short(raw: bytes) -> bytes:
    return raw[:40]  # shorter than its index says


@pytest.mark.parametrize(
    ("which", "damage", "named"),
    [(0, _flip_a_byte, "damaged"), (1, _cut_short, "shorter")],
    ids=["byte-flipped", "cut-short"],
)
def test_a_fold_refuses_a_broken_pack_and_deletes_nothing(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    which: int,
    damage: Callable[[bytes], bytes],
    named: str,
) -> None:
    home, _ = make_imp(tmp_path)
    origin = home.origin("yuko")
    _, names = delta_packs(origin)
    pack_dir = origin / "objects" / "pack"
    broken = pack_dir / f"{names[which]}.pack"
    broken.chmod(0o644)
    broken.write_bytes(damage(broken.read_bytes()))
    listed = sorted(os.listdir(pack_dir))
    monkeypatch.setattr(fold, "MAX_PACKS", 2)
    with pytest.raises(PackCopyError, match=named):
        fold.fold_objects(pygit2.Repository(str(origin)))
    assert sorted(os.listdir(pack_dir)) == listed  # no pack lost, no partial one left


def test_a_pack_of_many_objects_is_never_rewritten(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fold, "FOLD_OBJECTS", 40)
    home, repo = make_imp(tmp_path)
    origin = home.origin("yuko")
    with ObjectBatch(pygit2.Repository(str(origin)), threshold=2) as batch:
        for i in range(40):
            batch.add(pygit2.enums.ObjectType.BLOB, f"small {i}\n".encode())
        many = batch.write()
    assert many is not None
    inode = (origin / "objects" / "pack" / f"{many}.pack").stat().st_ino
    publish_runs(home, repo, 0, 100)
    assert (origin / "objects" / "pack" / f"{many}.pack").stat().st_ino == inode
    assert len(loose_files(origin)) < 4 * fold.LOOSE_DIRS  # the runs still fold
    assert_fsck_clean(origin)


def land_notes(home: Home, repo: pygit2.Repository, first: int, count: int) -> None:
    """``count`` one-note runs landed one after another, as the lane lands them."""
    for n in range(first, first + count):
        change = knowledge.change_of(repo, dict([knowledge.note(namespace(n), 1, slug=f"s{n}")]))
        result = knowledge.integrate_change(
            home, change, main_commit(repo), ns=namespace(n), run=run_id(n)
        )
        assert result.checkpoint == "integrated", result


def test_a_landing_folds_the_canonical_repository_once_its_sample_directory_fills(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fold, "SAMPLED_LOOSE", 2)
    monkeypatch.setattr(lane, "CANONICAL_FOLD_OBJECTS", 10_000)  # all of them in one fold
    home, repo = make_imp(tmp_path)
    git_dir = Path(repo.path)
    land_notes(home, repo, 0, 3)
    # Loose objects (a run's snapshot would leave such) until the sample directory holds two.
    sample, n = git_dir / "objects" / fold.SAMPLE_DIR, 0
    while not sample.is_dir() or len(os.listdir(sample)) < 2:
        repo.create_blob(f"loose {n}\n".encode())
        n += 1
    assert len(loose_files(git_dir)) > 100
    land_notes(home, repo, 3, 1)
    assert loose_files(git_dir) == [] and len(packs(git_dir)) == 1
    # Emptied directories stay: a run's checkpoint may be writing an object into one.
    assert (git_dir / "objects" / fold.SAMPLE_DIR).is_dir()
    land_notes(home, repo, 4, 2)
    assert 0 < len(loose_files(git_dir)) < 20  # no fold while the sample directory is not full
    assert_fsck_clean(git_dir)
    shown = git("-C", git_dir, "ls-tree", "-r", "--name-only", "main").stdout.split()
    assert len([p for p in shown if p.startswith("records/vendors/")]) == 6


def test_a_backlog_of_loose_objects_is_folded_a_budget_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A repository full of loose objects (an imp from before folds) never costs one lane
    pass all of them: each fold takes about its budget, the sample directory last, so
    the next passes keep folding until none is left."""
    monkeypatch.setattr(fold, "SAMPLED_LOOSE", 1)
    _, repo = make_imp(tmp_path)
    git_dir = Path(repo.path)
    sample, blobs = git_dir / "objects" / fold.SAMPLE_DIR, {}
    while len(blobs) < 300 or not sample.is_dir() or not os.listdir(sample):
        data = os.urandom(1000)
        blobs[repo.create_blob(data)] = data
    folds = []
    while (folded := fold.fold_objects(repo, keep_dirs=True, loose_budget=100)) is not None:
        folds.append(folded)
        assert len(folds) < 20, folds
    assert len(folds) >= 3, folds  # 300 loose objects or more, about 100 a fold
    assert all(f.loose_files <= 110 for f in folds), folds
    assert loose_files(git_dir) == []
    fresh = pygit2.Repository(str(git_dir))
    assert all(fresh[oid].data == data for oid, data in blobs.items())
    assert_fsck_clean(git_dir)
