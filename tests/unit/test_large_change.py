"""Large changes end to end: snapshot of a real directory, lane, published origin.

Their objects travel as packs (one for the blobs, one for the trees), so these
check what git itself says about both repositories, that a crash anywhere
before main moves changes nothing a retry cannot finish, that refused content
never reaches the origin, and that small changes still write loose objects.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pygit2
import pytest

from impyard.home import Home
from impyard.knowledge.change import Change, KnowledgeLimits
from impyard.knowledge.checkouts.checkout import Checkout
from impyard.knowledge.checkouts.snapshot import snapshot
from impyard.knowledge.imps import open_repo
from impyard.knowledge.integration import lane as lane_module
from impyard.knowledge.integration import origin as origin_module
from impyard.knowledge.integration.lane import LaneResult
from impyard.knowledge.integration.origin import publish_origin
from impyard.knowledge.store.packs import PACK_THRESHOLD, pack_object_count
from impyard.knowledge.store.repo import main_commit
from tests.helpers.git import git
from tests.helpers.repo import (
    NS,
    assert_fsck_clean,
    integrate_change,
    make_imp,
    namespace,
    note_text,
    run_id,
)

LIMITS = KnowledgeLimits()
RECORDS = 300
TOPICS = 2 * PACK_THRESHOLD  # enough directories that the trees go into a pack too


def write_records(
    root: Path, count: int, topics: int, ns: str = NS, body: str = "Acme ships SSO.\n"
) -> dict[str, bytes]:
    """What a box leaves in its overlay upper dir: only new files."""
    files: dict[str, bytes] = {}
    for n in range(1, count + 1):
        path = f"records/topic-{n % topics}/note-{n}--{ns}_{n}.md"
        data = note_text(f"{ns}_{n}", body=f"{body}Observation {n}.\n").encode()
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(data)
        files[path] = data
    return files


def checkpoint(
    home: Home, upper: Path, *, ns: str = NS, run: int = 1, base: str | None = None
) -> tuple[Change, LaneResult]:
    """The pipeline's checkpoint: snapshot, then integrate (validate + lane + origin)."""
    repo = open_repo(home, "yuko")
    base = base or main_commit(repo)
    change = snapshot(repo, Checkout(kind="overlay", base=base, root=upper), LIMITS)
    result = integrate_change(home, change, base, ns=ns, run=run_id(run), limits=LIMITS)
    return change, result


@contextlib.contextmanager
def power_cut_at(monkeypatch: pytest.MonkeyPatch, module: ModuleType, step: str) -> Iterator[None]:
    """The power goes when ``module.step`` is called (it raises instead), and the block
    within ends there: what ran before that step is all the crash leaves."""

    def power_cut(*args: object) -> None:
        raise RuntimeError(f"power cut at {module.__name__}.{step}")

    monkeypatch.setattr(module, step, power_cut)
    with pytest.raises(RuntimeError, match="power cut"):
        yield


def packs_in(git_dir: Path) -> dict[str, int]:
    """Pack file name -> inode."""
    pack_dir = git_dir / "objects" / "pack"
    return {name: os.stat(pack_dir / name).st_ino for name in os.listdir(pack_dir)}


def loose_objects(git_dir: Path) -> int:
    return sum(len(os.listdir(d)) for d in (git_dir / "objects").iterdir() if len(d.name) == 2)


def assert_published(home: Home, files: dict[str, bytes]) -> None:
    """main holds ``files`` in both repos, every object readable, git fsck clean on both."""
    head = main_commit(open_repo(home, "yuko"))
    for git_dir in (home.repo("yuko"), home.origin("yuko")):
        repo = pygit2.Repository(str(git_dir))
        assert str(repo.lookup_reference("refs/heads/main").target) == head
        tree = repo[head].peel(pygit2.Tree)
        for path, data in files.items():
            assert tree[path].data == data, (git_dir, path)
        listing = git("-C", git_dir, "ls-tree", "-r", "--name-only", "main").stdout.split()
        assert set(files) <= set(listing)
        assert_fsck_clean(git_dir)


def test_a_large_change_lands_as_packs_in_repo_and_origin(tmp_path: Path) -> None:
    home, _ = make_imp(tmp_path)
    files = write_records(tmp_path / "upper", RECORDS, TOPICS)
    before = loose_objects(home.repo("yuko"))
    change, result = checkpoint(home, tmp_path / "upper")
    assert result.checkpoint == "integrated", result.violations[:3]
    assert len(change.written) == RECORDS
    assert_published(home, files)
    # Blobs, trees and the commit went into packs: no new loose object.
    assert loose_objects(home.repo("yuko")) == before
    canonical = packs_in(home.repo("yuko"))
    assert len([n for n in canonical if n.endswith(".idx")]) == 2
    # The origin got the very same pack files (hard links), not copies of each object.
    published = packs_in(home.origin("yuko"))
    assert published == canonical
    # A clone of the origin, as a box would make, sees every record.
    clone = tmp_path / "clone"
    git("clone", "-q", home.origin("yuko"), clone)
    assert (clone / next(iter(files))).read_bytes() == files[next(iter(files))]


def test_a_large_change_beside_small_ones_keeps_history_complete(tmp_path: Path) -> None:
    home, _ = make_imp(tmp_path)
    small = write_records(tmp_path / "small", 1, 1, ns=namespace(1))
    assert checkpoint(home, tmp_path / "small", ns=namespace(1), run=1)[1].checkpoint == (
        "integrated"
    )
    large = write_records(tmp_path / "large", RECORDS, 7, ns=namespace(2))
    assert checkpoint(home, tmp_path / "large", ns=namespace(2), run=2)[1].checkpoint == (
        "integrated"
    )
    after = write_records(tmp_path / "after", 2, 1, ns=namespace(3))
    assert checkpoint(home, tmp_path / "after", ns=namespace(3), run=3)[1].checkpoint == (
        "integrated"
    )
    assert_published(home, {**small, **large, **after})


def test_a_crash_before_main_moves_changes_nothing_and_a_retry_lands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home, repo = make_imp(tmp_path)
    base = main_commit(repo)
    files = write_records(tmp_path / "upper", RECORDS, TOPICS)
    with power_cut_at(monkeypatch, lane_module, "_compare_and_swap_main"):
        checkpoint(home, tmp_path / "upper")
    assert main_commit(open_repo(home, "yuko")) == base
    assert git("-C", home.origin("yuko"), "rev-parse", "main").stdout.strip() == base
    # The packs written before the crash name nothing yet, and the origin has none.
    assert packs_in(home.repo("yuko"))
    assert not packs_in(home.origin("yuko"))
    assert_fsck_clean(home.repo("yuko"))
    assert_fsck_clean(home.origin("yuko"))

    monkeypatch.undo()
    _, result = checkpoint(home, tmp_path / "upper")
    assert result.checkpoint == "integrated"
    assert_published(home, files)


def test_a_crash_while_publishing_is_finished_by_the_next_refresh(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home, repo = make_imp(tmp_path)
    base = main_commit(repo)
    files = write_records(tmp_path / "upper", RECORDS, TOPICS)
    with power_cut_at(monkeypatch, origin_module, "_copy_objects"):
        checkpoint(home, tmp_path / "upper")
    landed = main_commit(open_repo(home, "yuko"))
    assert landed != base
    # Packs reached the origin, but its main still names the old, complete commit.
    assert packs_in(home.origin("yuko"))
    assert git("-C", home.origin("yuko"), "rev-parse", "main").stdout.strip() == base
    assert_fsck_clean(home.origin("yuko"))

    monkeypatch.undo()
    assert publish_origin(home, "yuko") == landed  # what `serve` recovery does
    assert_published(home, files)
    # Re-integrating the run finds it landed instead of landing it twice.
    again = checkpoint(home, tmp_path / "upper", base=base)[1]
    assert again == LaneResult("integrated", commit=landed)


def test_a_refused_large_change_never_reaches_the_origin(tmp_path: Path) -> None:
    home, _ = make_imp(tmp_path)
    upper = tmp_path / "upper"
    write_records(upper, RECORDS, TOPICS, body="token ghp_" + "A" * 36 + "\n")
    change, result = checkpoint(home, upper)
    assert result.checkpoint == "rejected"
    assert {v.rule for v in result.violations} == {"credential"}
    refused = [pygit2.Oid(hex=state.blob) for state in change.written.values()]
    refused_packs = set(packs_in(home.repo("yuko")))  # the refused run's snapshot pack
    assert refused_packs
    # A later good run lands; the refused run's pack stays in the canonical repo only.
    good = write_records(tmp_path / "good", 1, 1, ns=namespace(9))
    assert checkpoint(home, tmp_path / "good", ns=namespace(9), run=2)[1].checkpoint == (
        "integrated"
    )
    origin = pygit2.Repository(str(home.origin("yuko")))
    assert not any(origin.odb.exists(oid) for oid in refused)
    assert not refused_packs & set(packs_in(home.origin("yuko")))
    assert_published(home, good)


def test_a_small_change_lands_one_pack_the_origin_links(tmp_path: Path) -> None:
    home, _ = make_imp(tmp_path)
    files = write_records(tmp_path / "upper", 3, 1)
    before = loose_objects(home.origin("yuko"))
    _, result = checkpoint(home, tmp_path / "upper")
    assert result.checkpoint == "integrated"
    assert_published(home, files)
    # The lane's 3 trees (root, records/, the topic) and commit: one pack, the same file
    # in the origin (a hard link, not a copy); the 3 blobs the snapshot wrote go loose.
    canonical, origin = packs_in(home.repo("yuko")), packs_in(home.origin("yuko"))
    assert len(canonical) == 2 and canonical == origin
    (index,) = (home.origin("yuko") / "objects" / "pack").glob("*.idx")
    assert pack_object_count(index) == 4
    assert loose_objects(home.origin("yuko")) == before + 3


def test_an_origin_many_commits_behind_catches_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home, _ = make_imp(tmp_path)
    monkeypatch.setattr(lane_module, "sync_origin", lambda repo, path, made=None: main_commit(repo))
    files: dict[str, bytes] = {}
    for run, count in enumerate([1, RECORDS, 2, 40], start=1):
        upper = tmp_path / f"upper{run}"
        files.update(write_records(upper, count, 5, ns=namespace(run)))
        assert checkpoint(home, upper, ns=namespace(run), run=run)[1].checkpoint == "integrated"
    monkeypatch.undo()
    publish_origin(home, "yuko")
    assert_published(home, files)


def test_the_size_cache_forgets_its_oldest_entries_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Entries are facts about immutable commits, kept newest last: past the limit the
    oldest go, whatever their ids sort as."""
    from impyard.knowledge.validation import sizes

    repo = pygit2.init_repository(str(tmp_path / "repo.git"), bare=True)
    monkeypatch.setattr(sizes, "SIZE_CACHE_ENTRIES", 3)
    for sha in ("f" * 40, "e" * 40, "0" * 40, "1" * 40):
        sizes.write_size_cache_entry(repo, sha, 7)
    assert list(sizes._read_size_cache(repo)) == ["e" * 40, "0" * 40, "1" * 40]
