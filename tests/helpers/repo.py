"""Knowledge repositories for the knowledge-core tests: an imp's repo, notes, changes, checks."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pygit2

from impyard.dataroot import init_home
from impyard.home import Home
from impyard.knowledge.change import Change, FileState, KnowledgeLimits, Mode
from impyard.knowledge.imps import create_imp, open_repo
from impyard.knowledge.integration.lane import LaneResult, Trailers, integrate
from impyard.knowledge.store.repo import main_commit
from tests.helpers.git import git

NS = "n_7f3c91a2d0e4"
OTHER_NS = "n_0123456789ab"
RUN = "run-20260711T120000Z-0123456789"


def make_imp(tmp_path: Path, imp: str = "yuko") -> tuple[Home, pygit2.Repository]:
    home = Home(tmp_path / "home")
    init_home(home)
    create_imp(home, imp)
    return home, open_repo(home, imp)


def note_text(
    note_id: str,
    *,
    created_at: str = "2026-07-11T12:00:00Z",
    urls: Iterable[str] = ("https://example.com/report",),
    receipts: Iterable[str] = (),
    partial: Iterable[str] = (),
    body: str = "Acme ships SSO.\n",
) -> str:
    lines = ["---", f"id: {note_id}", f"created_at: {created_at}"]
    urls = list(urls)
    if urls:
        lines.append("source_urls:")
        lines.extend(f"- {u}" for u in urls)
    receipts = list(receipts)
    if receipts:
        lines.append("source_receipts:")
        lines.extend(f"- {r}" for r in receipts)
    partial = list(partial)
    if partial:
        lines.append("partial_receipts:")
        lines.extend(f"- {r}" for r in partial)
    lines.append("---")
    return "\n".join(lines) + "\n\n" + body


def note_path(ns: str = NS, number: int = 1, topic: str = "vendors", slug: str = "acme") -> str:
    return f"records/{topic}/{slug}--{ns}_{number}.md"


def note(ns: str = NS, number: int = 1, **kw: str) -> tuple[str, bytes]:
    return note_path(ns, number, **kw), note_text(f"{ns}_{number}").encode()


def change_of(
    repo: pygit2.Repository,
    files: Mapping[str, bytes | tuple[bytes, bool]] | None = None,
    deleted: Iterable[str] = (),
) -> Change:
    """A Change whose blobs are already in the repo's odb, as the snapshot leaves them."""
    written = {}
    for path, value in (files or {}).items():
        data, executable = value if isinstance(value, tuple) else (value, False)
        oid = repo.create_blob(data)
        written[path] = FileState(blob=str(oid), size=len(data), executable=executable)
    return Change(written=written, deleted=set(deleted))


def trailers(
    base: str,
    run: str = RUN,
    mode: Mode = "append",
    imp: str = "yuko",
    *,
    checkpoint: int = 1,
    at_exit: bool = True,
) -> Trailers:
    return Trailers(
        imp=imp,
        run=run,
        task="task-1",
        channel=None,
        base=base,
        mode=mode,
        checkpoint=checkpoint,
        at_exit=at_exit,
    )


def integrate_change(
    home: Home,
    change: Change,
    base: str,
    *,
    ns: str = NS,
    run: str = RUN,
    mode: Mode = "append",
    limits: KnowledgeLimits = KnowledgeLimits(),
    checkpoint: int = 1,
    at_exit: bool = True,
    **options: Any,
) -> LaneResult:
    """The lane's ``integrate`` of ``change`` on ``base`` for yuko, as run ``run`` of task-1
    (checkpoint ``checkpoint``) calls it; ``options`` are integrate's own (``landed``,
    ``keep_refused``, ``receipts`` ...)."""
    return integrate(
        home,
        "yuko",
        change,
        base=base,
        namespace=ns,
        mode=mode,
        limits=limits,
        trailers=trailers(base, run=run, mode=mode, checkpoint=checkpoint, at_exit=at_exit),
        **options,
    )


def run_id(n: int) -> str:
    return f"run-20260711T120000Z-{n:010x}"


def namespace(n: int) -> str:
    return f"n_{n:012x}"


def assert_fsck_clean(path: Path | str) -> None:
    result = git("-C", path, "fsck", "--strict", "--no-dangling", check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "error" not in result.stderr.lower(), result.stderr
    assert "warning" not in result.stderr.lower(), result.stderr


def tree_paths(repo: pygit2.Repository, rev: str | None = None) -> set[str]:
    commit = repo.revparse_single(rev or main_commit(repo)).peel(pygit2.Commit)
    out: set[str] = set()

    def walk(tree: pygit2.Tree, prefix: str) -> None:
        for entry in tree:
            if entry.type_str == "tree":
                walk(repo[entry.id], prefix + entry.name + "/")
            else:
                out.add(prefix + entry.name)

    walk(commit.tree, "")
    return out
