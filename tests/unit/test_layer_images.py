"""A big FULL layer is a squashfs image mounted as its lower directory: the same tree,
owners and modes as a layer of files, through a real overlay, with deltas on top;
mounted again after a reboot, unmounted before it is deleted."""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pygit2
import pytest

from impyard.home import Home
from impyard.knowledge.checkouts import image_archive, layer_build, layer_image
from impyard.knowledge.checkouts.checkout import prepare_checkout, release_checkout
from impyard.knowledge.checkouts.image_archive import TreeShape
from impyard.knowledge.checkouts.layer_store import chain_limit, list_layers
from impyard.knowledge.checkouts.layers import collect_layers, ensure_layer, layer_built_beside
from impyard.knowledge.checkouts.treefs import CheckoutError, UnsafeTreeError
from tests.helpers import checkout as checkouts
from tests.helpers.checkout import BASE_FILES, IMP, OWNER
from tests.unit.test_layers import git_archive, merged_view

LONG = "records/" + "d" * 70 + "/" + "e" * 70 + "/" + "f" * 90 + "--n_000000000000_9.md"
FILES = {
    **BASE_FILES,
    LONG: b"a path over ustar's 100 bytes\n",
    "records/caf\u00e9/\u00fcber--n_000000000000_8.md": b"a name beyond ASCII\n",
    "records/vendors/empty--n_000000000000_7.md": b"",
    "records/vendors/big--n_000000000000_6.md": bytes(range(256)) * 1024,
}


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Home]:
    checkouts.need_root()  # loop mounts and chowned layers
    if shutil.which(layer_image.TOOL) is None:
        if os.environ.get("CI") == "true":
            pytest.fail(
                f"{layer_image.TOOL} is missing under CI (scripts/bootstrap.sh installs it)"
            )
        pytest.skip(f"{layer_image.TOOL} is not installed")
    monkeypatch.setattr(layer_image, "IMAGE_MIN_FILES", 1)
    home = Home(tmp_path / "home")
    yield home
    layer_image.unmount_images(home.layers(IMP))
    assert mounts_under(tmp_path) == []


def mounts_under(root: Path) -> list[str]:
    with open("/proc/self/mounts") as table:
        return [line.split()[1] for line in table if line.split()[1].startswith(str(root))]


def assert_owned(tree_dir: Path, owner: tuple[int, int]) -> None:
    """Everything under ``tree_dir`` is ``owner``'s, files 0644 and directories 0755."""
    for dirpath, dirs, names in os.walk(tree_dir):
        for name in [*dirs, *names]:
            st = os.lstat(Path(dirpath) / name)
            assert (st.st_uid, st.st_gid) == owner
            assert stat.S_IMODE(st.st_mode) == (0o755 if stat.S_ISDIR(st.st_mode) else 0o644)


def test_a_big_full_layer_is_an_image_of_the_same_tree_owners_and_modes(
    home: Home, tmp_path: Path
) -> None:
    repo = checkouts.make_repo(home)
    c1 = checkouts.commit(repo, FILES)
    layer = ensure_layer(home, IMP, c1, OWNER)
    assert layer.kind == "full" and layer.image
    assert (layer.path / layer_image.IMAGE_NAME).is_file()
    assert layer_image.is_mounted(layer.tree_dir)
    assert checkouts.read_dir(layer.tree_dir) == git_archive(home, c1)
    assert_owned(layer.tree_dir, OWNER)
    with pytest.raises(OSError):
        (layer.tree_dir / "README.md").write_bytes(b"the lower layer never changes\n")
    # What the box does through the overlay: edit, add, delete, as the box user.
    checkout = prepare_checkout(home, IMP, "r-edit", c1, "overlay", OWNER)
    with checkouts.mounted(checkout, tmp_path / "m") as merged:
        checkouts.as_box(
            "echo more >> README.md && mkdir -p records/new && echo n > records/new/x.md "
            "&& rm organization/index.md",
            merged,
        )
        seen = checkouts.read_dir(merged)
    release_checkout(checkout, home.run_checkout_record("r-edit"))
    assert seen["README.md"] == BASE_FILES["README.md"] + b"more\n"
    assert seen["records/new/x.md"] == b"n\n" and "organization/index.md" not in seen
    assert checkouts.read_dir(layer.tree_dir) == git_archive(home, c1)


def test_deltas_stack_on_an_image_and_a_compaction_writes_a_new_image(
    home: Home, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(layer_build, "SQUASH_LIMIT", 0)  # every squash is too large
    repo = checkouts.make_repo(home)
    head = checkouts.commit(repo, FILES)
    first = ensure_layer(home, IMP, head, OWNER)
    head = checkouts.commit(repo, {"organization/index.md": None, "a/b.md": b"b\n"}, parent=head)
    delta = ensure_layer(home, IMP, head, OWNER)
    assert delta.kind == "delta" and not delta.image and delta.parent == first.id
    assert merged_view(home, tmp_path, head) == git_archive(home, head)
    for i in range(chain_limit(home, IMP)):
        head = checkouts.commit(repo, {f"records/t/n--n_1_{i + 1}.md": b"x\n"}, parent=head)
        ensure_layer(home, IMP, head, OWNER)
    fulls = [layer for layer in list_layers(home, IMP) if layer.kind == "full"]
    assert len(fulls) == 2 and all(layer.image for layer in fulls)
    assert merged_view(home, tmp_path, head) == git_archive(home, head)


def test_an_image_is_mounted_again_after_a_reboot_and_a_bad_one_is_refused(
    home: Home, tmp_path: Path
) -> None:
    repo = checkouts.make_repo(home)
    c1 = checkouts.commit(repo, FILES)
    layer = ensure_layer(home, IMP, c1, OWNER)
    layer_image.unmount_image(layer.tree_dir)  # what a reboot leaves: the image, no mount
    assert not layer_image.is_mounted(layer.tree_dir)
    assert merged_view(home, tmp_path, c1) == git_archive(home, c1)
    assert layer_image.is_mounted(layer.tree_dir)
    # An image that cannot be mounted stops the run; it never gets an empty checkout.
    layer_image.unmount_image(layer.tree_dir)
    # The kernel frees the unmounted image's loop device a little later; till then
    # `mount -o loop` would reuse it, and the old superblock it has read.
    released(layer.path / layer_image.IMAGE_NAME)
    with open(layer.path / layer_image.IMAGE_NAME, "r+b") as image:
        image.write(bytes(4096))
    with pytest.raises(CheckoutError, match="cannot mount the layer image"):
        prepare_checkout(home, IMP, "r-bad", c1, "overlay", OWNER)


def released(image: Path) -> None:
    """Wait until no loop device is bound to ``image``."""
    deadline = time.monotonic() + 30
    while str(image) in backing_files():
        assert time.monotonic() < deadline, f"a loop device still holds {image}"
        time.sleep(0.02)


def backing_files() -> set[str]:
    found = set()
    for backing in Path("/sys/block").glob("loop*/loop/backing_file"):
        with contextlib.suppress(OSError):  # a device freed while it is read
            found.add(backing.read_text().strip())
    return found


def test_collection_unmounts_an_image_before_deleting_it(home: Home, tmp_path: Path) -> None:
    repo = checkouts.make_repo(home)
    c1 = checkouts.commit(repo, FILES)
    c2 = checkouts.commit(repo, {"records/b/z--n_2_1.md": b"z\n"})  # unrelated root
    old = ensure_layer(home, IMP, c1, OWNER)
    ensure_layer(home, IMP, c2, OWNER)
    repo.references.create("refs/heads/main", pygit2.Oid(hex=c2), force=True)
    assert collect_layers(home, IMP, keep_commits=[c2]) == [old.id]
    assert not old.path.exists()
    assert mounts_under(home.layers(IMP)) == [
        str(home.layers(IMP) / list_layers(home, IMP)[0].id / "t")
    ]
    assert os.listdir(home.layers(IMP)) == [".lock", list_layers(home, IMP)[0].id]


def test_a_small_tree_or_a_missing_tool_keeps_files(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = checkouts.make_repo(home)
    c1 = checkouts.commit(repo, FILES)
    monkeypatch.setattr(layer_image, "IMAGE_MIN_FILES", len(FILES) + 1)
    small = ensure_layer(home, IMP, c1, OWNER)
    assert not small.image and not layer_image.is_mounted(small.tree_dir)
    monkeypatch.setattr(layer_image, "IMAGE_MIN_FILES", 1)
    monkeypatch.setattr(layer_image, "TOOL", "no-such-tar2sqfs")
    other = ensure_layer(home, IMP, c1, (1000, 1000))
    assert not other.image and checkouts.read_dir(other.tree_dir) == git_archive(home, c1)


def test_an_unsafe_tree_is_refused_before_an_image_is_written(
    home: Home, new_children: Callable[[], list[str]]
) -> None:
    repo = checkouts.make_repo(home)
    tree = repo.TreeBuilder(repo[checkouts.build_tree(repo, BASE_FILES)])
    tree.insert("escape", repo.create_blob(b"/etc"), pygit2.enums.FileMode.LINK)
    c1 = repo.create_commit("refs/heads/main", checkouts.SIG, checkouts.SIG, "t", tree.write(), [])
    with pytest.raises(UnsafeTreeError, match="escape: symlink"):
        ensure_layer(home, IMP, str(c1), OWNER)
    assert list_layers(home, IMP) == []
    assert [n for n in os.listdir(home.layers(IMP)) if n != ".lock"] == []
    assert new_children() == []  # the image's tools were stopped and reaped


def _children() -> dict[str, str]:
    """This process's child processes (exited but unreaped ones too): pid -> name."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat_line = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        name, _, rest = stat_line.rpartition(")")
        if int(rest.split()[1]) == os.getpid():
            found[entry] = name.partition("(")[2]
    return found


@pytest.fixture
def new_children() -> Callable[[], list[str]]:
    """The names of this process's children started since the test began: a worker may
    already have helpers of its own (multiprocessing's resource tracker, started by an
    earlier test, lives as long as the worker)."""
    earlier = set(_children())
    return lambda: [name for pid, name in _children().items() if pid not in earlier]


def test_a_failing_image_tool_fails_the_build_and_leaves_no_layer(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = checkouts.make_repo(home)
    c1 = checkouts.commit(repo, FILES)
    monkeypatch.setattr(layer_image, "TOOL", "false")  # exits 1 without reading
    with pytest.raises(CheckoutError, match="false could not write the layer image"):
        ensure_layer(home, IMP, c1, OWNER)
    assert list_layers(home, IMP) == []
    assert [n for n in os.listdir(home.layers(IMP)) if n != ".lock"] == []


def test_an_executable_file_or_an_owner_of_two_ids_gets_the_same_image_from_the_tree(
    home: Home,
) -> None:
    """git's archive (the fast route) would write an executable file 0755 and every owner
    root: such a tree, or an owner whose uid and gid differ, is written from the tree."""
    repo = checkouts.make_repo(home)
    tree = repo.TreeBuilder(repo[checkouts.build_tree(repo, FILES)])
    tool = repo.create_blob(b"#!/bin/sh\necho hi\n")
    tree.insert("tool.sh", tool, pygit2.enums.FileMode.BLOB_EXECUTABLE)
    c1 = str(
        repo.create_commit("refs/heads/main", checkouts.SIG, checkouts.SIG, "t", tree.write(), [])
    )
    for owner in (OWNER, (1000, 1001)):
        layer = ensure_layer(home, IMP, c1, owner)
        assert layer.image
        assert checkouts.read_dir(layer.tree_dir) == {**FILES, "tool.sh": b"#!/bin/sh\necho hi\n"}
        assert_owned(layer.tree_dir, owner)


def test_an_object_git_cannot_read_fails_the_build_and_leaves_no_layer(home: Home) -> None:
    repo = checkouts.make_repo(home)
    c1 = checkouts.commit(repo, FILES)
    blob = repo.revparse_single(f"{c1}:README.md").id
    loose = home.repo(IMP) / "objects" / str(blob)[:2] / str(blob)[2:]
    loose.unlink()
    with pytest.raises(CheckoutError, match=f"git could not archive the tree .*{blob}"):
        ensure_layer(home, IMP, c1, OWNER)
    assert list_layers(home, IMP) == []
    assert [n for n in os.listdir(home.layers(IMP)) if n != ".lock"] == []


def test_the_image_owner_is_rewritten_only_in_an_id_table_made_by_the_tool(
    home: Home, tmp_path: Path
) -> None:
    repo = checkouts.make_repo(home)
    c1 = checkouts.commit(repo, FILES)
    layer = ensure_layer(home, IMP, c1, OWNER)
    image = tmp_path / "copy.sqfs"
    shutil.copyfile(layer.path / layer_image.IMAGE_NAME, image)
    # Its one id is the owner's now, not root's: a second rewrite is refused.
    with pytest.raises(CheckoutError, match="an owner id table not made here"):
        image_archive.own_image(image, 1000)
    with open(image, "r+b") as handle:  # its superblock alone: the id table is past the end
        handle.truncate(96)
    with pytest.raises(CheckoutError, match="an owner id table not made here"):
        image_archive.own_image(image, 1000)
    image.write_bytes(bytes(4096))
    with pytest.raises(CheckoutError, match=r"not a squashfs 4\.0 image"):
        image_archive.own_image(image, 1000)


def test_a_layer_built_beside_other_work_is_there_after_it_and_a_refused_one_is_not(
    home: Home,
) -> None:
    repo = checkouts.make_repo(home)
    c1 = checkouts.commit(repo, FILES)
    with layer_built_beside(home, IMP, c1, "65532:65532"):
        pass
    (layer,) = list_layers(home, IMP)
    assert layer.commit == c1 and layer.image and layer_image.is_mounted(layer.tree_dir)
    tree = repo.TreeBuilder(repo[checkouts.build_tree(repo, BASE_FILES)])
    tree.insert("escape", repo.create_blob(b"/etc"), pygit2.enums.FileMode.LINK)
    c2 = str(repo.create_commit(None, checkouts.SIG, checkouts.SIG, "t", tree.write(), []))
    with layer_built_beside(home, IMP, c2, "65532:65532"):
        pass  # the unsafe tree is refused in the thread; whoever needs it is told why
    assert [layer.commit for layer in list_layers(home, IMP)] == [c1]
    with pytest.raises(UnsafeTreeError, match="escape: symlink"):
        ensure_layer(home, IMP, c2, OWNER)


def test_a_layer_built_beside_a_check_takes_its_word_instead_of_walking_the_tree(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A check that read every tree of the same commit says it is clean, how many of its
    files are executable and how wide its widest directory is: the image waits for that
    word instead of walking the tree again, and still writes an executable file 0644;
    without the word it walks."""
    from impyard.knowledge.checkouts.treefs import TreePlan

    walks: list[int] = []
    check = TreePlan.check
    monkeypatch.setattr(TreePlan, "check", lambda plan: (walks.append(plan.files), check(plan)))
    repo = checkouts.make_repo(home)
    c1 = checkouts.commit(repo, FILES)
    with layer_built_beside(home, IMP, c1, "65532:65532") as beside:
        beside.clean(TreeShape(executables=0, widest=4))
    (layer,) = list_layers(home, IMP)
    assert layer.image and checkouts.read_dir(layer.tree_dir) == FILES
    assert_owned(layer.tree_dir, OWNER)
    assert walks == []  # the tree was read only as far as telling it is big enough

    tree = repo.TreeBuilder(repo[checkouts.build_tree(repo, FILES)])
    tree.insert("tool.sh", repo.create_blob(b"#!/bin/sh\n"), pygit2.enums.FileMode.BLOB_EXECUTABLE)
    c2 = str(repo.create_commit(None, checkouts.SIG, checkouts.SIG, "t", tree.write(), []))
    with layer_built_beside(home, IMP, c2, "65532:65532") as beside:
        beside.clean(TreeShape(1, 4))  # written from the tree, as every file 0644
    layer = next(layer for layer in list_layers(home, IMP) if layer.commit == c2)
    assert checkouts.read_dir(layer.tree_dir) == {**FILES, "tool.sh": b"#!/bin/sh\n"}
    assert_owned(layer.tree_dir, OWNER)

    walks.clear()
    more = {**FILES, "records/more--n_000000000000_5.md": b"more\n"}
    tree_id = checkouts.build_tree(repo, more)
    c3 = str(repo.create_commit(None, checkouts.SIG, checkouts.SIG, "t", tree_id, []))
    with layer_built_beside(home, IMP, c3, "65532:65532") as beside:
        beside.clean(None)  # the check read fewer trees than all: no word on the rest
    layer = next(layer for layer in list_layers(home, IMP) if layer.commit == c3)
    assert layer.image and checkouts.read_dir(layer.tree_dir) == more
    assert walks == [len(more)]  # walked here, to its end


@pytest.mark.parametrize("owner", [OWNER, (1000, 1001)], ids=["by-git", "from-here"])
def test_a_tree_with_a_directory_too_wide_for_an_image_is_written_as_files(
    home: Home,
    monkeypatch: pytest.MonkeyPatch,
    owner: tuple[int, int],
    new_children: Callable[[], list[str]],
) -> None:
    """The image tool's time grows with the square of a directory's entries (a minute for
    100,000 in one): a tree with a directory wider than ``WIDEST_IMAGE_DIR`` is files,
    whichever route its image took, with nothing of the image or its tools left."""
    repo = checkouts.make_repo(home)
    c1 = checkouts.commit(repo, FILES)  # records/vendors/ holds 4 files, the widest
    monkeypatch.setattr(layer_image, "WIDEST_IMAGE_DIR", 3)
    layer = ensure_layer(home, IMP, c1, owner)
    assert not layer.image and not (layer.path / layer_image.IMAGE_NAME).exists()
    assert not layer_image.is_mounted(layer.tree_dir)
    assert checkouts.read_dir(layer.tree_dir) == FILES
    assert_owned(layer.tree_dir, owner)
    assert new_children() == []

    monkeypatch.setattr(layer_image, "WIDEST_IMAGE_DIR", 4)  # as wide as allowed
    tree_id = checkouts.build_tree(repo, FILES)
    c2 = str(repo.create_commit(None, checkouts.SIG, checkouts.SIG, "again", tree_id, []))
    layer = ensure_layer(home, IMP, c2, owner)
    assert layer.image and checkouts.read_dir(layer.tree_dir) == FILES


def test_a_check_beside_that_found_a_wide_directory_makes_the_layer_files(
    home: Home, monkeypatch: pytest.MonkeyPatch, new_children: Callable[[], list[str]]
) -> None:
    monkeypatch.setattr(layer_image, "WIDEST_IMAGE_DIR", 3)
    repo = checkouts.make_repo(home)
    c1 = checkouts.commit(repo, FILES)
    with layer_built_beside(home, IMP, c1, "65532:65532") as beside:
        beside.clean(TreeShape(executables=0, widest=4))
    (layer,) = list_layers(home, IMP)
    assert not layer.image and checkouts.read_dir(layer.tree_dir) == FILES
    assert new_children() == []
