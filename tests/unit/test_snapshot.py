"""The snapshot: a finished run's change, hashed safely, in both checkout kinds."""

from __future__ import annotations

import contextlib
import os
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

import pygit2
import pytest

from impyard.home import Home
from impyard.knowledge.change import Change, FileState, KnowledgeLimits
from impyard.knowledge.checkouts.checkout import Checkout, prepare_checkout, release_checkout
from impyard.knowledge.checkouts.snapshot import MAX_DEPTH, snapshot
from tests.helpers import checkout as checkouts
from tests.helpers.checkout import BASE_FILES, IMP, OWNER
from tests.helpers.git import git

# Files over max_file_chars are kept up to 1 MiB in all: the 10 MiB file below is not read.
LIMITS = KnowledgeLimits(candidate_max_bytes=2**20)
ACME = "records/vendors/acme--n_000000000000_1.md"
GLOBEX = "records/vendors/globex--n_000000000000_2.md"
ATTENTION = "records/papers/attention--n_000000000000_3.md"


class Run:
    def __init__(self, home: Home, repo: pygit2.Repository, checkout: Checkout) -> None:
        self.home = home
        self.repo = repo
        self.checkout = checkout

    def snap(self) -> Change:
        """Snapshot in a thread: a test fails, not hangs, if anything blocks."""
        result: list[Change] = []
        errors: list[BaseException] = []

        def target() -> None:
            try:
                result.append(snapshot(self.repo, self.checkout, LIMITS))
            except BaseException as exc:
                errors.append(exc)

        thread = threading.Thread(target=target, daemon=True)
        thread.start()
        thread.join(timeout=30)
        assert not thread.is_alive(), "snapshot blocked"
        if errors:
            raise errors[0]
        return result[0]


@pytest.fixture(params=["overlay", "copy"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@contextlib.contextmanager
def box(tmp_path: Path, kind: str) -> Iterator[tuple[Run, Path]]:
    """A prepared run and the directory its box writes to; the box is gone on exit."""
    checkouts.need_root()
    home = Home(tmp_path / "home")
    repo = checkouts.make_repo(home)
    base = checkouts.commit(repo, BASE_FILES)
    checkout = prepare_checkout(home, IMP, "r1", base, kind, OWNER)  # type: ignore[arg-type]
    run = Run(home, repo, checkout)
    if kind == "overlay":
        with checkouts.mounted(checkout, tmp_path / "merged") as merged:
            yield run, merged
    else:
        yield run, checkout.root


def problems(change: Change) -> set[tuple[str, str]]:
    return {(p.path, p.rule) for p in change.problems}


def test_one_note_run(tmp_path: Path, kind: str) -> None:
    with box(tmp_path, kind) as (run, kdir):
        checkouts.as_box("mkdir records/new && printf 'note\\n' > records/new/a--n_1_1.md", kdir)
    change = run.snap()
    blob = str(pygit2.hash(b"note\n"))
    assert change.written == {"records/new/a--n_1_1.md": FileState(blob, 5, False)}
    assert change.deleted == set() and change.problems == []
    assert git("-C", run.home.repo(IMP), "cat-file", "-p", blob).stdout == "note\n"
    git("-C", run.home.repo(IMP), "fsck", "--strict")


def test_empty_and_unchanged_copies_are_not_reported(tmp_path: Path, kind: str) -> None:
    with box(tmp_path, kind) as (run, kdir):
        # copied up (overlay) or re-written (copy), each with base content and mode
        checkouts.as_box(f"touch {ACME} && cat {GLOBEX} > x && cat x > {GLOBEX} && rm x", kdir)
        os.chmod(kdir / ATTENTION, 0o600)
        os.chmod(kdir / ATTENTION, 0o644)
    if kind == "overlay":
        assert {ACME, GLOBEX} <= {str(p.relative_to(run.checkout.root)) for p in _files(run)}
    change = run.snap()
    assert change.is_empty


def _files(run: Run) -> list[Path]:
    return [Path(d) / n for d, _, names in os.walk(run.checkout.root) for n in names]


def test_deletions_replacements_and_opaque_dirs(tmp_path: Path, kind: str) -> None:
    with box(tmp_path, kind) as (run, kdir):
        checkouts.as_box(
            f"rm {GLOBEX}"
            " && rm -r records/papers && mkdir records/papers"
            " && echo new > records/papers/b--n_1_1.md"
            " && rm -r organization/topics && echo file > organization/topics"
            " && echo changed > organization/index.md",
            kdir,
        )
    change = run.snap()
    assert change.deleted == {GLOBEX, ATTENTION, "organization/topics/vendors.md"}
    assert set(change.written) == {
        "records/papers/b--n_1_1.md",
        "organization/topics",
        "organization/index.md",
    }
    assert change.problems == []
    if kind == "overlay":
        opaque = os.getxattr(run.checkout.root / "records/papers", "trusted.overlay.opaque")
        assert opaque == b"y"


def test_deleting_a_whole_base_directory(tmp_path: Path, kind: str) -> None:
    with box(tmp_path, kind) as (run, kdir):
        checkouts.as_box("rm -r organization", kdir)
    change = run.snap()
    assert change.deleted == {"organization/index.md", "organization/topics/vendors.md"}
    assert not change.written and not change.problems


def test_forged_mtime_with_same_size_is_still_seen(tmp_path: Path, kind: str) -> None:
    with box(tmp_path, kind) as (run, kdir):
        before = os.lstat(kdir / ACME)
        (kdir / ACME).write_bytes(b"ACME\n")  # same size
        os.utime(kdir / ACME, ns=(before.st_atime_ns, before.st_mtime_ns))
    change = run.snap()
    assert change.written[ACME].blob == str(pygit2.hash(b"ACME\n"))


def test_adversarial_entries_are_refused_not_followed(tmp_path: Path, kind: str) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = b"secret outside the checkout\n"
    (outside / "secret.md").write_bytes(secret)
    big = b"x" * (10 * 1024 * 1024)
    with box(tmp_path, kind) as (run, kdir):
        r = kdir / "records"
        os.symlink("/etc/passwd", r / "passwd.md")
        os.symlink("loop.md", r / "loop.md")
        os.symlink(outside, r / "outdir")
        os.symlink(outside / "secret.md", r / "secret.md")
        os.mkfifo(r / "fifo.md")
        os.mknod(r / "sock.md", stat.S_IFSOCK | 0o644)
        os.mknod(r / "null.md", stat.S_IFCHR | 0o644, os.makedev(1, 3))
        (r / "one.md").write_bytes(b"one\n")
        os.link(r / "one.md", r / "two.md")
        (r / "big.md").write_bytes(big)
        (r / "exec.md").write_bytes(b"#!/bin/sh\n")
        os.chmod(r / "exec.md", 0o755)
        os.chmod(kdir / ACME, 0o755)
        os.close(os.open(os.fsencode(r) + b"/bad-\xff.md", os.O_CREAT | os.O_WRONLY, 0o644))
        (r / "new\nline.md").write_bytes(b"newline\n")
        os.mkdir(r / "esc\x1bdir")
        (r / "esc\x1bdir" / "inner.md").write_bytes(b"inner\n")
    change = run.snap()
    assert problems(change) == {
        ("records/passwd.md", "symlink"),
        ("records/loop.md", "symlink"),
        ("records/outdir", "symlink"),
        ("records/secret.md", "symlink"),
        ("records/fifo.md", "special-file"),
        ("records/sock.md", "special-file"),
        ("records/null.md", "special-file"),
        ("records/one.md", "hard-link"),
        ("records/two.md", "hard-link"),
        ("records/big.md", "file-too-large"),
        (repr(b"records/bad-\xff.md"), "bad-name"),
        (repr(b"records/new\nline.md"), "bad-name"),
        (repr(b"records/esc\x1bdir"), "bad-name"),
    }
    assert all(p.message for p in change.problems)
    assert change.written == {
        "records/exec.md": FileState(str(pygit2.hash(b"#!/bin/sh\n")), 10, True),
        ACME: FileState(str(pygit2.hash(b"acme\n")), 5, True),
    }
    assert change.deleted == set()
    # nothing refused was read: none of its bytes reached the odb
    odb = run.repo.odb
    for data in (secret, big, Path("/etc/passwd").read_bytes(), b"one\n", b"inner\n"):
        assert not odb.exists(pygit2.hash(data))


def test_files_over_the_limit_are_kept_up_to_the_candidate_bound_and_never_read_past_it(
    tmp_path: Path, kind: str
) -> None:
    # 800,000 bytes is the default max_file_chars' byte limit; 1 MiB the bound here.
    first, second = b"a" * 900_000, b"b" * 900_000
    with box(tmp_path, kind) as (run, kdir):
        (kdir / "records" / "first.md").write_bytes(first)
        (kdir / "records" / "second.md").write_bytes(second)
    change = run.snap()
    # The walk order decides which one fits; exactly one is kept, the other listed.
    [kept] = list(change.written)
    [refused] = change.problems
    assert {kept, refused.path} == {"records/first.md", "records/second.md"}
    assert refused.rule == "file-too-large" and "not kept" in refused.message
    assert "candidate_max_bytes" in refused.message
    assert change.written[kept].size == 900_000
    odb = run.repo.odb
    assert odb.exists(pygit2.hash(first if kept.endswith("first.md") else second))
    assert not odb.exists(pygit2.hash(second if kept.endswith("first.md") else first))
    # A check keeps nothing over the limit: the size alone refuses it.
    checked = snapshot(run.repo, run.checkout, LIMITS, store=False)
    assert checked.written == {}
    assert {p.rule for p in checked.problems} == {"file-too-large"}
    assert len(checked.problems) == 2


def test_a_symlink_replacing_a_base_file_is_a_deletion_and_a_problem(
    tmp_path: Path, kind: str
) -> None:
    with box(tmp_path, kind) as (run, kdir):
        os.unlink(kdir / ACME)
        os.symlink("/etc/passwd", kdir / ACME)
    change = run.snap()
    assert problems(change) == {(ACME, "symlink")}
    assert change.deleted == {ACME} and not change.written


def test_directories_nested_too_deep_are_refused(tmp_path: Path, kind: str) -> None:
    with box(tmp_path, kind) as (run, kdir):
        deep = kdir / "records" / "/".join(["d"] * (MAX_DEPTH + 5))
        deep.mkdir(parents=True)
        (deep / "x.md").write_bytes(b"deep\n")
    change = run.snap()
    assert [p.rule for p in change.problems] == ["too-deep"]
    assert not change.written


def test_snapshot_reads_only_what_changed(tmp_path: Path, kind: str) -> None:
    """Only the changed file is opened; untouched base files are never read."""
    with box(tmp_path, kind) as (run, kdir):
        checkouts.as_box("echo n > records/vendors/n--n_1_1.md", kdir)
    opened: list[str] = []
    real_open = os.open

    def spy(path: object, flags: int, *args: object, **kwargs: object) -> int:
        opened.append(os.fsdecode(path) if isinstance(path, (str, bytes)) else str(path))
        return real_open(path, flags, *args, **kwargs)  # type: ignore[arg-type]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(os, "open", spy)
        change = run.snap()
    assert set(change.written) == {"records/vendors/n--n_1_1.md"}
    file_opens = [name for name in opened if name.endswith(".md")]
    assert file_opens == ["n--n_1_1.md"]


def test_release_after_snapshot(tmp_path: Path, kind: str) -> None:
    with box(tmp_path, kind) as (run, kdir):
        checkouts.as_box("echo n > records/n--n_1_1.md", kdir)
    run.snap()
    release_checkout(run.checkout, run.checkout.root.parent / "checkout.json")
    assert not run.checkout.root.exists()
