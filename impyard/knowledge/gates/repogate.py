"""The gate for a whole repository from outside the lane, as ``git fsck --strict`` sees it.

A restore checks each fetched repository here before anything is installed, and
``impyard knowledge check`` checks an imp's own: main's tree under the rules the lane
keeps true of main, every other ref's tree (candidates, quarantine) and every commit of
their history under the rules of any tree the host keeps, each commit's header as git
reads it, and then every object the repository holds that no ref reaches (a pack from a
hostile server may carry more than was asked for). The host never runs the git CLI:
these are fsck's checks, done by ``gitfsck`` and ``treegate``, each object read once.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping

import pygit2

from impyard.home import Home
from impyard.knowledge.change import KnowledgeLimits
from impyard.knowledge.gates.treegate import (
    KEPT_RULES,
    MAIN_RULES,
    GateLimits,
    Problems,
    TreeProblem,
    TreeWalk,
)
from impyard.knowledge.imps import open_repo
from impyard.knowledge.store.gitfsck import parse_commit
from impyard.knowledge.store.repo import MAIN

#: Commits a check reads at most (an imp lands a few hundred a day).
MAX_COMMITS = 1_000_000
#: The longest line a commit may hold (header or message). The lane's longest is a
#: ``Source-Receipt`` trailer, whose URL came through the gateway in request lines of at
#: most 64 KiB each (a CONNECT's host, then the path inside it); a preserved commit's
#: reason lines are shorter still. A longer line was not written by Impyard, and would be
#: copied whole into every page and listing that shows the commit.
MAX_COMMIT_LINE = 256 * 1024

_COMMIT = pygit2.enums.ObjectType.COMMIT
_TREE = pygit2.enums.ObjectType.TREE
_BLOB = pygit2.enums.ObjectType.BLOB


def check_imp(home: Home, imp: str, limits: KnowledgeLimits) -> Problems:
    """Every problem of the imp's canonical repository: all its refs, their history and
    every object (``impyard knowledge check``)."""
    repo = open_repo(home, imp)
    refs: dict[str, pygit2.Oid] = {}
    for name in repo.references:
        target = repo.references[name].resolve().target
        if isinstance(target, pygit2.Oid):
            refs[name] = target
    return check_repository(repo, refs, GateLimits.of(limits))


def check_repository(
    repo: pygit2.Repository, refs: Mapping[str, pygit2.Oid], limits: GateLimits
) -> Problems:
    """Every problem of ``refs`` (name -> commit), their history and ``repo``'s objects."""
    problems = Problems()
    walk = TreeWalk(repo, limits, problems)
    seen: set[bytes] = set()
    parents: deque[bytes] = deque()
    # Main first: a tree it shares with a candidate is judged by main's stricter rules.
    for name in sorted(refs, key=lambda ref: (ref != MAIN, ref)):
        where = "main" if name == MAIN else name
        oid = refs[name].raw
        seen.add(oid)
        parents.extend(_commit(repo, walk, oid, where, main=name == MAIN))
    while parents:
        oid = parents.popleft()
        if oid in seen:
            continue
        seen.add(oid)
        if len(seen) > MAX_COMMITS:
            problems.add(
                TreeProblem("history", "", "repo-too-large", f"over {MAX_COMMITS} commits")
            )
            return problems
        parents.extend(_commit(repo, walk, oid, oid.hex()[:12], main=False))
    _unreferenced(repo, walk, seen)
    return problems


def _commit(
    repo: pygit2.Repository, walk: TreeWalk, oid: bytes, where: str, *, main: bool
) -> list[bytes]:
    """Check one commit and its tree; its parents."""
    target = pygit2.Oid(raw=oid)
    try:
        kind, data = repo.odb.read(target)
    except (KeyError, ValueError, pygit2.GitError):
        walk.problems.add(TreeProblem(where, "", "missing-object", f"commit {target} is not there"))
        return []
    if kind != _COMMIT:
        walk.problems.add(TreeProblem(where, "", "bad-object", f"{target} is not a commit"))
        return []
    parsed = parse_commit(data)
    for message in parsed.problems:
        walk.problems.add(TreeProblem(where, "", "bad-object", f"commit {target}: {message}"))
    longest = longest_line(data, MAX_COMMIT_LINE)
    if longest is not None:
        walk.problems.add(
            TreeProblem(
                where,
                "",
                "long-line",
                f"commit {target}: a line of {longest:,} bytes, over the {MAX_COMMIT_LINE:,}-"
                "byte bound (the lane writes no longer line)",
            )
        )
    if parsed.tree is not None:
        walk.walk(parsed.tree, where, MAIN_RULES if main else KEPT_RULES)
    return parsed.parents


def longest_line(data: bytes, limit: int) -> int | None:
    """The length of the first line of ``data`` longer than ``limit`` bytes (None: none
    is). Reads each byte about twice, however many lines there are: a window of
    ``limit + 1`` bytes without a newline is a line too long, and the next window starts
    after the last newline of this one."""
    pos = 0
    while len(data) - pos > limit:
        newline = data.rfind(b"\n", pos, pos + limit + 1)
        if newline < 0:
            end = data.find(b"\n", pos)
            return (len(data) if end < 0 else end) - pos
        pos = newline + 1
    return None


def _unreferenced(repo: pygit2.Repository, walk: TreeWalk, commits: set[bytes]) -> None:
    """Objects no ref reaches, each checked alone as fsck checks them too: a commit's
    header, a tree's form and entries; a tag is refused (Impyard writes none)."""
    for target in repo.odb:
        oid = target.raw
        if oid in commits or walk.has_seen(oid):
            continue
        where = f"object {str(target)[:12]}"
        try:
            kind = repo.odb.read_header(target)[0]
            if kind == _COMMIT:
                for message in parse_commit(repo.odb.read(target)[1]).problems:
                    walk.problems.add(TreeProblem(where, "", "bad-object", f"commit: {message}"))
        except (KeyError, ValueError, pygit2.GitError):
            continue  # listed, then gone (a loose object a pack replaced)
        if kind == _TREE:
            walk.check_object(oid, where)
        elif kind not in (_COMMIT, _BLOB):
            walk.problems.add(
                TreeProblem(where, "", "bad-object", "a tag object (Impyard keeps no tags)")
            )
