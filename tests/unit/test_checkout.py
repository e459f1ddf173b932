"""The run checkout: overlay pieces, copy fallback, records, release."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from impyard.home import Home
from impyard.knowledge.checkouts import checkout as checkout_module
from impyard.knowledge.checkouts import runspace
from impyard.knowledge.checkouts.checkout import (
    Checkout,
    CheckoutError,
    mount_options,
    prefill_overlay,
    prepare_checkout,
    read_identities,
    release_checkout,
)
from impyard.knowledge.checkouts.layers import collect_layers, ensure_layer
from tests.helpers import checkout as checkouts
from tests.helpers.checkout import BASE_FILES, IMP, OWNER


@pytest.fixture
def home(tmp_path: Path) -> Home:
    checkouts.need_root()
    return Home(tmp_path / "home")


def test_overlay_checkout_is_two_empty_dirs_over_the_base_chain(home: Home) -> None:
    repo = checkouts.make_repo(home)
    base = checkouts.commit(repo, BASE_FILES)
    checkout = prepare_checkout(home, IMP, "r1", base, "overlay", "65532:65532")
    assert checkout.kind == "overlay" and checkout.base == base
    assert checkout.root == home.run_checkout("r1") and os.listdir(checkout.root) == []
    assert checkout.workdir == home.run_overlay_work("r1")
    for path in (checkout.root, checkout.workdir):
        st = os.lstat(path)
        assert (st.st_uid, st.st_gid) == OWNER
    assert len(checkout.lowerdirs) == 1 and checkouts.read_dir(checkout.lowerdirs[0]) == BASE_FILES
    options = mount_options(checkout)
    assert options.startswith(f"lowerdir={checkout.lowerdirs[0]},upperdir={checkout.root},")
    assert "redirect_dir=off" in options and "metacopy=off" in options
    assert Checkout.from_dict(checkout.to_dict()) == checkout


def test_box_user_can_write_records_through_the_mount(home: Home, tmp_path: Path) -> None:
    repo = checkouts.make_repo(home)
    base = checkouts.commit(repo, BASE_FILES)
    checkout = prepare_checkout(home, IMP, "r1", base, "overlay", OWNER)
    with checkouts.mounted(checkout, tmp_path / "merged") as merged:
        checkouts.as_box(
            "mkdir records/new && echo hi > records/new/a--n_1_1.md"
            " && echo more >> records/vendors/acme--n_000000000000_1.md"
            " && rm organization/index.md && mv organization/topics organization/t2",
            merged,
        )
        assert (merged / "records/new/a--n_1_1.md").read_bytes() == b"hi\n"
    upper = checkouts.read_dir(checkout.root)
    assert upper["records/new/a--n_1_1.md"] == b"hi\n"
    assert upper["records/vendors/acme--n_000000000000_1.md"] == b"acme\nmore\n"
    assert upper["organization/t2/vendors.md"] == b"vendors\n"
    # the layer itself is untouched
    assert checkouts.read_dir(checkout.lowerdirs[-1]) == BASE_FILES


def test_copy_checkout_is_the_full_tree_with_identities(home: Home) -> None:
    repo = checkouts.make_repo(home)
    base = checkouts.commit(repo, BASE_FILES)
    checkout = prepare_checkout(home, IMP, "r1", base, "copy", OWNER)
    assert checkout.kind == "copy" and checkout.lowerdirs == () and checkout.workdir is None
    assert checkouts.read_dir(checkout.root) == BASE_FILES
    identities = read_identities(checkout.index_path)
    assert set(identities) == set(BASE_FILES)
    st = os.lstat(checkout.root / "README.md")
    assert identities["README.md"] == (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (*OWNER, 0o644)
    # the index lives beside the checkout: the box never sees it
    assert not checkout.index_path.is_relative_to(checkout.root)
    assert Checkout.from_dict(checkout.to_dict()) == checkout
    with pytest.raises(CheckoutError):
        mount_options(checkout)


@pytest.mark.parametrize("kind", ["overlay", "copy"])
def test_release_removes_the_checkout_but_keeps_the_run_dir(home: Home, kind: str) -> None:
    repo = checkouts.make_repo(home)
    base = checkouts.commit(repo, BASE_FILES)
    home.run_dir("r1").mkdir(parents=True)
    home.manifest("r1").write_text("{}")
    checkout = prepare_checkout(home, IMP, "r1", base, kind, OWNER)  # type: ignore[arg-type]
    (checkout.root / "dangling").symlink_to("/etc/passwd")
    record = home.run_checkout_record("r1")
    release_checkout(checkout, record)
    # What is left is the run's (empty) space, which the pipeline releases with the run.
    assert sorted(os.listdir(home.run_dir("r1"))) == ["manifest.json", "space"]
    assert os.listdir(home.run_space("r1")) == []
    assert Path("/etc/passwd").exists()
    release_checkout(checkout, record)  # idempotent


def test_prepare_again_after_a_crash_starts_clean(home: Home) -> None:
    repo = checkouts.make_repo(home)
    base = checkouts.commit(repo, BASE_FILES)
    first = prepare_checkout(home, IMP, "r1", base, "overlay", OWNER)
    (first.root / "leftover").write_text("x")
    second = prepare_checkout(home, IMP, "r1", base, "overlay", OWNER)
    assert os.listdir(second.root) == []


def test_paths_unfit_for_mount_options_are_refused(tmp_path: Path) -> None:
    checkout = Checkout(
        kind="overlay",
        base="0" * 40,
        root=tmp_path / "a,b" / "knowledge",
        lowerdirs=(tmp_path / "l",),
        workdir=tmp_path / "work",
    )
    with pytest.raises(CheckoutError, match="contains one of"):
        mount_options(checkout)
    long_chain = Checkout(
        kind="overlay",
        base="0" * 40,
        root=tmp_path / "u",
        lowerdirs=tuple(tmp_path / ("x" * 250) / str(i) for i in range(20)),
        workdir=tmp_path / "w",
    )
    with pytest.raises(CheckoutError, match="limit of mount"):
        mount_options(long_chain)


def test_unknown_base_is_refused(home: Home) -> None:
    repo = checkouts.make_repo(home)
    checkouts.commit(repo, BASE_FILES)
    for kind in ("overlay", "copy"):
        with pytest.raises(CheckoutError):
            prepare_checkout(home, IMP, "r1", "1" * 40, kind, OWNER)  # type: ignore[arg-type]


def test_a_prefilled_knowledge_dir_is_an_overlay_whose_upper_dir_holds_only_the_change(
    home: Home,
) -> None:
    """A ready box's knowledge dir, filled ahead of its run: the base's layer chain under an
    overlay the host mounted, kept from layer collection while the box waits; the run that
    claims it gets that overlay as its checkout, whose root (what its snapshot reads)
    holds only what was written through the mount."""
    repo = checkouts.make_repo(home)
    base = checkouts.commit(repo, BASE_FILES)
    knowledge = home.root / "warm" / "pool" / "box" / "space" / "knowledge"
    knowledge.mkdir(parents=True)
    prefill_overlay(home, IMP, base, knowledge, OWNER)
    try:
        assert os.path.ismount(knowledge) and checkouts.read_dir(knowledge) == BASE_FILES
        # Main moves to an unrelated tree with a layer of its own: only the box's record
        # still names the base's layer, and it is kept.
        ensure_layer(home, IMP, checkouts.commit(repo, {"other.md": b"x"}), OWNER)
        assert collect_layers(home, IMP, []) == []
        checkout = prepare_checkout(home, IMP, "r1", base, "copy", OWNER, knowledge, True)
        assert checkout.kind == "overlay" and checkout.mounted_at == knowledge
        assert checkouts.read_dir(checkout.lowerdirs[-1]) == BASE_FILES
        checkouts.as_box("echo more >> README.md && rm organization/index.md", knowledge)
        assert sorted(os.listdir(checkout.root)) == ["README.md", "organization"]
        assert (checkout.root / "README.md").read_bytes() == BASE_FILES["README.md"] + b"more\n"
    finally:
        runspace.unmount_within(knowledge.parent)
    assert not os.path.ismount(knowledge)


def test_a_prefill_the_kernel_refuses_to_overlay_is_a_copy_in_place(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refused(checkout: Checkout, target: Path) -> None:
        raise CheckoutError("no overlay here")

    monkeypatch.setattr(checkout_module, "mount_overlay", refused)
    repo = checkouts.make_repo(home)
    base = checkouts.commit(repo, BASE_FILES)
    knowledge = home.root / "warm" / "pool" / "box" / "space" / "knowledge"
    knowledge.mkdir(parents=True)
    prefill_overlay(home, IMP, base, knowledge, OWNER)
    assert sorted(os.listdir(knowledge.parent)) == ["checkout.idx", "knowledge"]
    assert not (knowledge.parent.parent / "checkout.json").exists()
    assert checkouts.read_dir(knowledge) == BASE_FILES
    checkout = prepare_checkout(home, IMP, "r1", base, "copy", OWNER, knowledge, True)
    assert checkout == Checkout(kind="copy", base=base, root=knowledge)
    assert set(read_identities(checkout.index_path)) == set(BASE_FILES)
