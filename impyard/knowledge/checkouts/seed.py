"""Seed a rework run's checkout with the files a rejected run wrote, so its box starts
where that one stopped and only has to fix what was refused.

The files come from the preserved commit (a candidate or quarantine the host wrote),
read by its oid: a commit's change against its base (first parent). Never from a box's
checkout. Each path is judged by the lane's name rules before anything is written; a
path they refuse is skipped and listed (the task file names it), never materialised.

Append namespacing: a record named in the rejected run's namespace
(``records/<topic>/<slug>--<old-ns>_<n>.md``) is renamed into the new run's
(``--<new-ns>_<n>.md``, the only namespace it may write), and an ``id: <old-ns>_<n>``
line in its frontmatter is rewritten to match. Other names stay as they were: a name
that was refused is the box's to fix.

Where the files go: an overlay checkout's upper dir (the run's own change: the
snapshot reads it as files the box wrote), or, in the copy fallback, over the plain
copy after its identities were recorded (a file the index does not know, or whose inode
changed, is hashed as the box's). Either way as the box user, 0644, each directory
opened without following links and each file created new.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from impyard.knowledge.checkouts.checkout_record import Checkout
from impyard.knowledge.checkouts.treefs import CheckoutError, Owner, is_blob
from impyard.knowledge.validation.pathnames import path_violations
from impyard.knowledge.validation.records import RECORDS

if TYPE_CHECKING:
    import pygit2

# Git's library (pygit2, through gitobj) is loaded only where a rework run's files are
# planned or written: every run's box spec names the plan, and a run of its own process
# loads the library beside its box's start instead, not before it (40 ms).

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True)
class SeedFile:
    #: Where it goes in the new checkout, and where it was in the preserved commit.
    path: str
    was: str
    blob: str


@dataclass
class SeedPlan:
    """What a rework checkout starts with, and what it could not."""

    old_namespace: str
    new_namespace: str
    files: list[SeedFile] = field(default_factory=list)
    #: (path, why) of each file not seeded.
    skipped: list[tuple[str, str]] = field(default_factory=list)
    #: Paths the rejected run deleted: not repeated (the box deletes them again if it must).
    deleted: list[str] = field(default_factory=list)

    @property
    def renamed(self) -> dict[str, str]:
        """Old path → new path, for each file seeded under another name."""
        return {f.was: f.path for f in self.files if f.was != f.path}


def rename_into(path: str, old: str, new: str) -> str:
    """``path`` with a record name's ``--<old>_<n>`` suffix in namespace ``new``."""
    if not path.startswith(f"{RECORDS}/"):
        return path
    head, _, name = path.rpartition("/")
    marker = f"--{old}_"
    at = name.rfind(marker)
    if at < 0:
        return path
    return f"{head}/{name[:at]}--{new}_{name[at + len(marker) :]}"


def rewrite_id(data: bytes, old: str, new: str) -> bytes:
    """``data`` with a frontmatter ``id: <old>_<n>`` line naming namespace ``new``."""
    if not data.startswith(b"---\n"):
        return data
    end = data.find(b"\n---", 3)
    if end < 0:
        return data
    pattern = re.compile(rb"(?m)^(id:[ \t]*)" + re.escape(old.encode()) + rb"_")
    head = pattern.sub(lambda m: m[1] + new.encode() + b"_", data[:end])
    return head + data[end:]


def plan_seed(repo: pygit2.Repository, commit: str, old: str, new: str) -> SeedPlan:
    """The files of preserved ``commit`` a rework run in namespace ``new`` starts with."""
    import pygit2

    from impyard.knowledge.store.gitobj import changed_paths, commit_at, lookup_entry

    preserved = commit_at(repo, commit, CheckoutError)
    parent = preserved.parents[0].tree if preserved.parents else None
    plan = SeedPlan(old, new)
    taken: set[str] = set()
    for was in changed_paths(parent, preserved.tree):
        entry = lookup_entry(preserved.tree, was)
        if entry is None or isinstance(entry, pygit2.Tree):
            plan.deleted.append(was)
            continue
        path = rename_into(was, old, new)
        faults = path_violations(path)
        if faults:
            plan.skipped.append((was, "; ".join(f"{v.rule}: {v.message}" for v in faults)))
        elif not isinstance(entry, pygit2.Blob) or not is_blob(entry):
            plan.skipped.append((was, f"not a regular file (mode {int(entry.filemode):o})"))
        elif path in taken:
            plan.skipped.append((was, f"another file is seeded as {path}"))
        else:
            taken.add(path)
            plan.files.append(SeedFile(path, was, str(entry.id)))
    return plan


def seed_checkout(
    repo: pygit2.Repository, checkout: Checkout, plan: SeedPlan, owner: Owner
) -> None:
    """Write the plan's files into the checkout (see the module doc); a file the checkout
    cannot take (a base file is in the way of its directory) moves to ``plan.skipped``."""
    import pygit2

    root = os.open(checkout.root, _DIR_FLAGS)
    try:
        kept: list[SeedFile] = []
        for item in plan.files:
            blob = repo[item.blob]
            if not isinstance(blob, pygit2.Blob):
                plan.skipped.append((item.was, f"object {item.blob} is not a blob"))
                continue
            data = blob.data
            if item.path != item.was or item.path.endswith(".md"):
                data = rewrite_id(data, plan.old_namespace, plan.new_namespace)
            why = _write(root, item.path, data, owner)
            if why is None:
                kept.append(item)
            else:
                plan.skipped.append((item.was, why))
        plan.files = kept
    finally:
        os.close(root)


def _write(root: int, path: str, data: bytes, owner: Owner) -> str | None:
    """Write one file under ``root``; why not, when something is in its way."""
    *parents, name = path.split("/")
    fd = os.dup(root)
    try:
        for part in parents:
            created = False
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, 0o755, dir_fd=fd)
                created = True
            try:
                sub = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ENOTDIR, errno.ELOOP):
                    return f"{part!r} in its path is not a directory in this checkout"
                raise
            os.close(fd)
            fd = sub
            if created:  # as the box user, whatever the host's umask narrowed
                os.fchown(fd, *owner)
                os.fchmod(fd, 0o755)
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            pass
        else:
            if not stat.S_ISREG(st.st_mode):
                return "something other than a file holds its name in this checkout"
            os.unlink(name, dir_fd=fd)  # a base file (copy checkout): replaced, new inode
        out = os.open(name, _NEW_FILE, 0o644, dir_fd=fd)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(out, view) :]
            os.fchown(out, *owner)
            os.fchmod(out, 0o644)
        finally:
            os.close(out)
        return None
    finally:
        os.close(fd)
