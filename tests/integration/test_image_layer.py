"""An imp big enough for its checkout's FULL layer to be a squashfs image, through the real
CLI and engine: the box sees every record and its runs land, the next run stacks on the
image, and removing the imp leaves no mount behind."""

from __future__ import annotations

from pathlib import Path

import pygit2
import pytest

from impyard.home import Home
from impyard.knowledge.checkouts.layer_image import IMAGE_MIN_FILES, unmount_images
from impyard.knowledge.integration.origin import publish_origin
from tests.helpers.cli import Cli
from tests.helpers.cli import run_json as run
from tests.helpers.git import git

pytestmark = pytest.mark.docker

RECORDS = IMAGE_MIN_FILES
SIG = pygit2.Signature("Test", "test@example.invalid", 1_700_000_000, 0)
COUNT = (
    'n=$(find "$IMPYARD_KNOWLEDGE_DIR/records" -type f | wc -l); '
    'printf "saw $n files\\n" | impyard-note counts {slug} --source https://example.com/c'
)


def add_records(repo_path: Path, count: int) -> None:
    """``count`` records on main, committed straight into the repository (as a restore or
    an owner's commit would), in 50 topics."""
    repo = pygit2.Repository(str(repo_path))
    head = repo.references["refs/heads/main"].peel(pygit2.Commit)
    pygit2.settings.enable_fsync_gitdir(False)
    try:
        topics: dict[int, pygit2.TreeBuilder] = {}
        for i in range(count):
            ident = f"n_{i // 1000:012x}_{i % 1000 + 1}"
            body = f"---\nid: {ident}\ncreated_at: 2026-01-01T00:00:00Z\n---\nrecord {i}\n"
            builder = topics.setdefault(i % 50, repo.TreeBuilder())
            builder.insert(f"r{i}--{ident}.md", repo.create_blob(body.encode()), 0o100644)
        records = repo.TreeBuilder(head.tree["records"].id)
        for topic, builder in topics.items():
            records.insert(f"topic-{topic:02d}", builder.write(), 0o040000)
        root = repo.TreeBuilder(head.tree)
        root.insert("records", records.write(), 0o040000)
        repo.create_commit("refs/heads/main", SIG, SIG, "records\n", root.write(), [head.id])
    finally:
        pygit2.settings.enable_fsync_gitdir(True)


def image_mounts(root: Path) -> list[str]:
    with open("/proc/self/mounts") as table:
        return [
            fields[1]
            for fields in (line.split() for line in table)
            if fields[2] == "squashfs" and fields[1].startswith(str(root))
        ]


def landed_note(cli: Cli, slug: str) -> str:
    repo = cli("knowledge", "yuko").stdout.strip()
    names = git("-C", repo, "ls-tree", "-r", "--name-only", "main", "records/counts").stdout
    path = next(name for name in names.split() if name.split("/")[-1].startswith(f"{slug}--"))
    return git("-C", repo, "show", f"main:{path}").stdout


def test_a_big_imp_runs_on_an_image_layer_and_leaves_no_mount(yuko: Cli) -> None:
    home = Home(yuko.home)
    add_records(home.repo("yuko"), RECORDS)
    publish_origin(home, "yuko")
    try:
        code, first = run(yuko, COUNT.format(slug="first"))
        assert code == 0 and first["checkpoint"] == "integrated", first
        assert len(image_mounts(home.root)) == 1
        # What the box saw: every record, and the README the imp was created with.
        assert f"saw {RECORDS + 1} files" in landed_note(yuko, "first")
        code, second = run(yuko, COUNT.format(slug="second"))
        assert code == 0 and second["checkpoint"] == "integrated", second
        assert f"saw {RECORDS + 2} files" in landed_note(yuko, "second")
        assert len(image_mounts(home.root)) == 1  # the second run stacked on the same image
        removed = yuko("imp", "rm", "yuko", "--purge-knowledge")
        assert removed.code == 0, removed.stderr
        assert image_mounts(home.root) == []
        assert not home.imp_dir("yuko").exists()
    finally:
        unmount_images(home.layers("yuko"))
