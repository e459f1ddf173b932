"""Trees and commits the lane never writes, built byte by byte (pygit2's TreeBuilder refuses
some of these names), and backup remotes holding them: for the tree gate's tests."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pygit2

from impyard.backup.meta import SETTINGS_REF, settings_commit
from impyard.knowledge.imps import ImpSettings

TREE = pygit2.enums.ObjectType.TREE
COMMIT = pygit2.enums.ObjectType.COMMIT
IDENT = b"Test <test@example.invalid> 1700000000 +0000"

Entry = tuple[bytes, bytes, pygit2.Oid]  # mode, name, object


def raw_tree(repo: pygit2.Repository, entries: list[Entry], *, ordered: bool = True) -> pygit2.Oid:
    """A tree object with exactly these entries (in git's order unless ``ordered`` is off)."""
    if ordered:
        entries = sorted(entries, key=lambda e: e[1] + (b"/" if e[0] == b"40000" else b""))
    body = b"".join(mode + b" " + name + b"\0" + oid.raw for mode, name, oid in entries)
    return repo.odb.write(TREE, body)


def raw_commit(
    repo: pygit2.Repository,
    tree: pygit2.Oid,
    parents: list[pygit2.Oid] | None = None,
    *,
    author: bytes = IDENT,
    message: bytes = b"an owner's commit\n",
) -> pygit2.Oid:
    lines = [b"tree " + str(tree).encode()]
    lines += [b"parent " + str(p).encode() for p in parents or []]
    lines += [b"author " + author, b"committer " + IDENT]
    return repo.odb.write(COMMIT, b"\n".join(lines) + b"\n\n" + message)


def blob(repo: pygit2.Repository, data: bytes = b"pwned\n") -> pygit2.Oid:
    return repo.create_blob(data)


def knowledge_tree(repo: pygit2.Repository, records: list[Entry]) -> pygit2.Oid:
    """An imp's tree (README.md, organization/, records/) with ``records`` added to records/."""
    readme = blob(repo, b"# knowledge\n")
    return raw_tree(
        repo,
        [
            (b"100644", b"README.md", readme),
            (b"40000", b"organization", raw_tree(repo, [(b"100644", b"README.md", readme)])),
            (b"40000", b"records", raw_tree(repo, [(b"100644", b"README.md", readme), *records])),
        ],
    )


def deep_tree(repo: pygit2.Repository, levels: int) -> pygit2.Oid:
    tree = raw_tree(repo, [(b"100644", b"leaf.md", blob(repo))])
    for _ in range(levels):
        tree = raw_tree(repo, [(b"40000", b"d", tree)])
    return tree


@dataclass(frozen=True)
class Hostile:
    """A crafted entry of records/: what the gate must say of it."""

    entries: Callable[[pygit2.Repository, Path], list[Entry]]
    path: str  # where the gate names it, from the tree's root
    rule: str
    #: Whether ``git fsck --strict`` (any version) refuses it too.
    fsck_refuses: bool


def traversal_name(outside: Path) -> bytes:
    """A name that, written relative to any directory of the data root, lands at ``outside``."""
    return b"../" * 40 + str(outside).lstrip("/").encode()


def _dotgit(name: bytes) -> Callable[[pygit2.Repository, Path], list[Entry]]:
    def entries(repo: pygit2.Repository, outside: Path) -> list[Entry]:
        config = raw_tree(repo, [(b"100644", b"config", blob(repo, b"[core]\n"))])
        return [(b"40000", name, config)]

    return entries


HOSTILE: dict[str, Hostile] = {
    "traversal": Hostile(
        lambda repo, outside: [(b"100644", traversal_name(outside), blob(repo))],
        "records/../",
        "path-escape",
        True,
    ),
    "dot-git": Hostile(_dotgit(b".git"), "records/.git", "git-metadata", True),
    "dot-GIT": Hostile(_dotgit(b".GIT"), "records/.GIT", "git-metadata", True),
    "dotdot": Hostile(
        lambda repo, outside: [(b"40000", b"..", raw_tree(repo, [(b"100644", b"x", blob(repo))]))],
        "records/..",
        "path-escape",
        True,
    ),
    "deep": Hostile(
        lambda repo, outside: [(b"40000", b"deep", deep_tree(repo, 5000))],
        "records/deep/d/d/d",
        "too-deep",
        False,
    ),
    "symlink": Hostile(
        lambda repo, outside: [(b"120000", b"passwd.md", blob(repo, b"/etc/passwd"))],
        "records/passwd.md",
        "symlink",
        False,
    ),
    "non-utf8": Hostile(
        lambda repo, outside: [(b"100644", b"caf\xe9.md", blob(repo))],
        "records/caf\\xe9.md",
        "bad-name",
        False,
    ),
    "submodule": Hostile(
        lambda repo, outside: [(b"160000", b"sub", pygit2.Oid(hex="1" * 40))],
        "records/sub",
        "special-file",
        False,
    ),
}


def hostile_remote(
    base: Path,
    case: str,
    outside: Path,
    *,
    imp: str = "yuko",
    settings: ImpSettings | None = None,
) -> pygit2.Repository:
    """``<base>/<imp>.git``, a backup whose main holds the crafted ``case`` in records/."""
    repo = pygit2.init_repository(str(base / f"{imp}.git"), bare=True, initial_head="main")
    tree = knowledge_tree(repo, HOSTILE[case].entries(repo, outside))
    repo.references.create("refs/heads/main", raw_commit(repo, tree))
    if settings is not None:
        repo.references.create(SETTINGS_REF, settings_commit(repo, settings))
    return repo


def owner_commit(repo: pygit2.Repository, case: str, outside: Path) -> pygit2.Oid:
    """Main moved, outside the lane, to a commit whose records/ holds ``case``."""
    main = repo.references["refs/heads/main"]
    tree = knowledge_tree(repo, HOSTILE[case].entries(repo, outside))
    commit = raw_commit(repo, tree, [main.target])
    main.set_target(commit)
    return commit
