"""Overlay lower layers: materialization, deltas, compaction, GC and crash safety."""

from __future__ import annotations

import io
import json
import os
import stat
import subprocess
import tarfile
from pathlib import Path

import pygit2
import pytest

from impyard.home import Home
from impyard.knowledge.checkouts import layer_build
from impyard.knowledge.checkouts.checkout import prepare_checkout, release_checkout
from impyard.knowledge.checkouts.layer_store import chain_limit, layer_chain, list_layers
from impyard.knowledge.checkouts.layers import collect_layers, ensure_layer
from impyard.knowledge.checkouts.treefs import CheckoutError
from tests.helpers import checkout as checkouts
from tests.helpers.checkout import BASE_FILES, IMP, OWNER
from tests.helpers.git import git


@pytest.fixture
def home(tmp_path: Path) -> Home:
    checkouts.need_root()  # layers are chowned to the box user
    return Home(tmp_path / "home")


def git_archive(home: Home, commit_id: str) -> dict[str, bytes]:
    raw = subprocess.run(
        ["git", "-C", str(home.repo(IMP)), "archive", commit_id],
        capture_output=True,
        check=True,
    ).stdout
    out = {}
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        for member in tar.getmembers():
            if member.isfile():
                handle = tar.extractfile(member)
                assert handle is not None
                out[member.name] = handle.read()
    return out


def merged_view(home: Home, tmp_path: Path, commit_id: str) -> dict[str, bytes]:
    """What a box sees for ``commit_id``: the layer chain through a real overlay mount."""
    checkout = prepare_checkout(home, IMP, f"view-{commit_id[:8]}", commit_id, "overlay", OWNER)
    try:
        with checkouts.mounted(checkout, tmp_path / f"m-{commit_id[:8]}") as merged:
            return checkouts.read_dir(merged)
    finally:
        release_checkout(checkout, home.run_checkout_record(f"view-{commit_id[:8]}"))


def test_full_layer_matches_git_archive_file_by_file(home: Home) -> None:
    repo = checkouts.make_repo(home)
    c1 = checkouts.commit(repo, BASE_FILES)
    layer = ensure_layer(home, IMP, c1, OWNER)
    assert layer.kind == "full" and layer.depth == 0
    assert checkouts.read_dir(layer.tree_dir) == git_archive(home, c1)
    for dirpath, dirs, names in os.walk(layer.tree_dir):
        for name in [*dirs, *names]:
            st = os.lstat(Path(dirpath) / name)
            assert (st.st_uid, st.st_gid) == OWNER
            assert st.st_mode & 0o111 == (0o111 if stat.S_ISDIR(st.st_mode) else 0)
    # git itself agrees the repo is sound (materializing wrote no index into it)
    assert not (home.repo(IMP) / "index").exists()
    git("-C", home.repo(IMP), "fsck", "--strict")


def test_ensure_layer_is_idempotent_and_records_meta(home: Home) -> None:
    repo = checkouts.make_repo(home)
    c1 = checkouts.commit(repo, BASE_FILES)
    first = ensure_layer(home, IMP, c1, "65532:65532")
    again = ensure_layer(home, IMP, c1, OWNER)
    assert first == again
    meta = json.loads((first.path / "meta.json").read_text())
    assert meta["commit"] == c1 and meta["owner"] == "65532:65532" and meta["kind"] == "full"
    # a different owner never reuses the layer
    other = ensure_layer(home, IMP, c1, (1000, 1000))
    assert other.id != first.id
    assert os.lstat(other.tree_dir / "README.md").st_uid == 1000


def test_delta_layers_through_a_real_overlay_mount(home: Home, tmp_path: Path) -> None:
    repo = checkouts.make_repo(home)
    c1 = checkouts.commit(repo, BASE_FILES)
    ensure_layer(home, IMP, c1, OWNER)
    # additions, a changed file, a deleted file, a deleted directory, a file
    # replacing a directory and a directory replacing a file
    c2 = checkouts.commit(
        repo,
        {
            "records/vendors/initech--n_1_1.md": b"new\n",
            "organization/index.md": b"index v2\n",
            "records/vendors/globex--n_000000000000_2.md": None,
            "records/papers": None,
            "organization/topics": b"now a file\n",
            "README.md/inner.md": b"dir replaces file\n",
        },
        parent=c1,
    )
    delta = ensure_layer(home, IMP, c2, OWNER)
    assert delta.kind == "delta" and delta.depth == 1
    # the delta holds only the change, not the tree
    written = checkouts.read_dir(delta.tree_dir)
    assert "records/vendors/acme--n_000000000000_1.md" not in written
    whiteout = os.lstat(delta.tree_dir / "records/vendors/globex--n_000000000000_2.md")
    assert stat.S_ISCHR(whiteout.st_mode) and whiteout.st_rdev == 0
    assert os.getxattr(delta.tree_dir / "README.md", "trusted.overlay.opaque") == b"y"
    c3 = checkouts.commit(repo, {"records/papers/again--n_1_2.md": b"back\n"}, parent=c2)
    ensure_layer(home, IMP, c3, OWNER)
    for c in (c1, c2, c3):
        assert merged_view(home, tmp_path, c) == git_archive(home, c)


def test_a_full_chain_squashes_into_one_delta_on_its_full_layer(home: Home, tmp_path: Path) -> None:
    repo = checkouts.make_repo(home)
    head = checkouts.commit(repo, BASE_FILES)
    full = ensure_layer(home, IMP, head, OWNER)
    limit = chain_limit(home, IMP)
    for i in range(limit):
        head = checkouts.commit(
            repo, {f"records/t/n--n_1_{i + 1}.md": f"{i}\n".encode()}, parent=head
        )
        layer = ensure_layer(home, IMP, head, OWNER)
        assert len(layer_chain(home, IMP, layer)) <= limit
    # the chain was full: the new layer holds every note since the FULL layer, on it
    assert layer.kind == "delta" and layer.depth == 1 and layer.parent == full.id
    assert len(checkouts.read_dir(layer.tree_dir)) == limit
    assert [x.kind for x in list_layers(home, IMP)].count("full") == 1
    assert merged_view(home, tmp_path, head) == git_archive(home, head)


def test_compaction_builds_a_full_layer_by_hard_links(
    home: Home, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(layer_build, "SQUASH_LIMIT", 0)  # every squash is too large
    repo = checkouts.make_repo(home)
    head = checkouts.commit(repo, BASE_FILES)
    first_full = ensure_layer(home, IMP, head, OWNER)
    commits = [head]
    limit = chain_limit(home, IMP)
    for i in range(limit + 1):
        head = checkouts.commit(
            repo, {f"records/t/n--n_1_{i + 1}.md": f"{i}\n".encode()}, parent=head
        )
        commits.append(head)
        layer = ensure_layer(home, IMP, head, OWNER)
        assert len(layer_chain(home, IMP, layer)) <= limit
    compacted = [layer for layer in list_layers(home, IMP) if layer.kind == "full"]
    assert len(compacted) == 2
    new_full = next(layer for layer in compacted if layer.id != first_full.id)
    assert checkouts.read_dir(new_full.tree_dir) == git_archive(home, new_full.commit)
    # unchanged files share the inode of the first FULL layer: no bytes rewritten
    shared = os.lstat(new_full.tree_dir / "README.md")
    assert shared.st_ino == os.lstat(first_full.tree_dir / "README.md").st_ino
    assert merged_view(home, tmp_path, commits[-1]) == git_archive(home, commits[-1])


def test_copy_up_of_a_hard_linked_lower_file_has_one_link(
    home: Home, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Compaction shares inodes; a box editing such a file must not look like a hard link."""
    monkeypatch.setattr(layer_build, "SQUASH_LIMIT", 0)
    repo = checkouts.make_repo(home)
    head = checkouts.commit(repo, BASE_FILES)
    ensure_layer(home, IMP, head, OWNER)
    for i in range(chain_limit(home, IMP)):
        head = checkouts.commit(repo, {f"records/t/n--n_1_{i + 1}.md": b"x\n"}, parent=head)
        ensure_layer(home, IMP, head, OWNER)
    layer = ensure_layer(home, IMP, head, OWNER)
    assert layer.kind == "full" and os.lstat(layer.tree_dir / "README.md").st_nlink > 1
    checkout = prepare_checkout(home, IMP, "r-link", head, "overlay", OWNER)
    with checkouts.mounted(checkout, tmp_path / "m") as merged:
        (merged / "README.md").write_bytes(b"edited\n")
    assert os.lstat(checkout.root / "README.md").st_nlink == 1
    release_checkout(checkout, home.run_checkout_record("r-link"))


def test_gc_keeps_needed_chains_and_running_checkouts(home: Home) -> None:
    repo = checkouts.make_repo(home)
    c1 = checkouts.commit(repo, BASE_FILES)
    c2 = checkouts.commit(repo, {"records/a/x--n_1_1.md": b"x\n"}, parent=c1)
    c3 = checkouts.commit(repo, {"records/a/y--n_1_2.md": b"y\n"}, parent=c2)
    other = checkouts.commit(repo, {"records/b/z--n_2_1.md": b"z\n"})  # unrelated root
    for c in (c1, c2, c3, other):
        ensure_layer(home, IMP, c, OWNER)
    repo.references.create("refs/heads/main", pygit2.Oid(hex=c1), force=True)
    running = prepare_checkout(home, IMP, "r-running", other, "overlay", OWNER)
    removed = collect_layers(home, IMP, keep_commits=[c2])
    assert {layer.commit for layer in list_layers(home, IMP)} == {c1, c2, other}
    assert [r[:12] for r in removed] == [c3[:12]]
    release_checkout(running, home.run_checkout_record("r-running"))
    collect_layers(home, IMP, keep_commits=[c2])
    assert {layer.commit for layer in list_layers(home, IMP)} == {c1, c2}
    assert [n for n in os.listdir(home.layers(IMP)) if n.startswith(".trash")] == []


def test_gc_keeps_the_layer_nearest_main_even_when_the_caller_is_stale(home: Home) -> None:
    # Two runs integrate back to back: the first collects with the main it read before
    # the second landed. Main's newest layered ancestor must survive, or the next run
    # rebuilds the whole tree instead of stacking a delta.
    repo = checkouts.make_repo(home)
    c1 = checkouts.commit(repo, BASE_FILES)
    c2 = checkouts.commit(repo, {"records/a/x--n_1_1.md": b"x\n"}, parent=c1)
    ensure_layer(home, IMP, c1, OWNER)
    ensure_layer(home, IMP, c2, OWNER)
    c3 = checkouts.commit(repo, {"records/a/y--n_1_2.md": b"y\n"}, parent=c2)  # main, no layer yet
    collect_layers(home, IMP, keep_commits=[])
    assert {layer.commit for layer in list_layers(home, IMP)} == {c1, c2}
    assert ensure_layer(home, IMP, c3, OWNER).kind == "delta"


def test_a_crashed_build_leaves_nothing_usable(home: Home, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = checkouts.make_repo(home)
    c1 = checkouts.commit(repo, BASE_FILES)

    def crash(*args: object, **kwargs: object) -> None:
        raise OSError("disk on fire")

    monkeypatch.setattr(layer_build, "atomic_write_json", crash)
    with pytest.raises(OSError):
        ensure_layer(home, IMP, c1, OWNER)
    monkeypatch.undo()
    assert list_layers(home, IMP) == []
    # a stale temp dir from a killed process (no cleanup ran) is ignored, then removed
    stale = home.layers(IMP) / f".tmp-{c1[:12]}-65532.65532-deadbeef"
    (stale / "t").mkdir(parents=True)
    (stale / "meta.json").write_text("{}")
    assert list_layers(home, IMP) == []
    layer = ensure_layer(home, IMP, c1, OWNER)
    assert not stale.exists()
    assert checkouts.read_dir(layer.tree_dir) == BASE_FILES


def test_bad_commit_is_refused(home: Home) -> None:
    repo = checkouts.make_repo(home)
    checkouts.commit(repo, BASE_FILES)
    with pytest.raises(CheckoutError, match="not a full"):
        ensure_layer(home, IMP, "main", OWNER)
    with pytest.raises(CheckoutError, match="not in"):
        ensure_layer(home, IMP, "0" * 40, OWNER)


def test_a_commit_whose_parent_has_no_layer_stacks_on_the_nearest_ancestor(
    home: Home, tmp_path: Path
) -> None:
    # Concurrent runs land commits faster than their layers are built: C3's parent C2
    # has no layer yet, so C3 must be a delta on C1 (not a whole-tree rebuild).
    repo = checkouts.make_repo(home)
    c1 = checkouts.commit(repo, BASE_FILES)
    base = ensure_layer(home, IMP, c1, OWNER)
    c2 = checkouts.commit(repo, {"records/a/one--n_000000000001_1.md": b"one\n"}, parent=c1)
    c3 = checkouts.commit(
        repo,
        {"records/a/two--n_000000000002_1.md": b"two\n", "organization/index.md": None},
        parent=c2,
    )
    layer = ensure_layer(home, IMP, c3, OWNER)
    assert (layer.kind, layer.parent, layer.depth) == ("delta", base.id, 1)
    assert set(checkouts.read_dir(layer.tree_dir)) >= {
        "records/a/one--n_000000000001_1.md",
        "records/a/two--n_000000000002_1.md",
    }
    assert merged_view(home, tmp_path, c3) == git_archive(home, c3)
