"""History without the purged files: every commit of every ref, rewritten parents first.

One walk serves the preview and the purge: ``rewrite(write=False)`` decides the same
entries and counts the same commits, writing nothing, so a dry run's counts are what
the purge does. A commit is rewritten when its tree loses an entry, its message loses
the purged string, or a parent was rewritten; every other commit keeps its id. Trees
are decided once per id (and per path, for a glob), so a large history that shares
most of its trees costs little more than its changed ones. Authors, committers, dates
and trailers are kept as they were.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pygit2

from impyard.purge.selector import Matcher, all_commits, commit_refs

_TREE = pygit2.enums.FileMode.TREE


@dataclass
class Rewrite:
    """What the rewrite changed (a dry run: would change)."""

    #: Old commit -> its rewrite (a dry run maps a changed commit to itself).
    commits: dict[pygit2.Oid, pygit2.Oid] = field(default_factory=dict)
    changed: set[pygit2.Oid] = field(default_factory=set)
    blobs: set[pygit2.Oid] = field(default_factory=set)
    paths: set[str] = field(default_factory=set)
    #: Records citing the purged source and others: kept, named.
    not_cleared: set[str] = field(default_factory=set)
    messages: int = 0
    #: Ref -> (its commit now, its commit after); only refs that move.
    refs: dict[str, tuple[pygit2.Oid, pygit2.Oid]] = field(default_factory=dict)


class _Trees:
    def __init__(self, repo: pygit2.Repository, matcher: Matcher, out: Rewrite, write: bool):
        self.repo, self.matcher, self.out, self.write = repo, matcher, out, write
        self._done: dict[tuple[pygit2.Oid, str], tuple[pygit2.Oid, bool]] = {}

    def rewrite(self, tree: pygit2.Tree, prefix: str) -> tuple[pygit2.Oid, bool]:
        """The tree without the purged entries (its id, and whether it changed)."""
        key = (tree.id, prefix if self.matcher.path_dependent else "")
        done = self._done.get(key)
        if done is None:
            done = self._done[key] = self._rewrite(tree, prefix)
        return done

    def _rewrite(self, tree: pygit2.Tree, prefix: str) -> tuple[pygit2.Oid, bool]:
        dropped: list[str] = []
        replaced: dict[str, tuple[pygit2.Oid, int]] = {}
        for entry in tree:
            name = entry.name or ""
            path = f"{prefix}{name}"
            if self.matcher.drops_name(name):
                dropped.append(name)
                self._note_all(entry, path)
            elif entry.filemode == _TREE:
                child = self.repo[entry.id]
                assert isinstance(child, pygit2.Tree)
                new, changed = self.rewrite(child, f"{path}/")
                if changed:
                    replaced[name] = (new, entry.filemode)
            elif entry.type_str == "blob":
                verdict = self.matcher.blob(path, entry.id)
                if verdict == "purge":
                    dropped.append(name)
                    self.out.blobs.add(entry.id)
                    self.out.paths.add(path)
                elif verdict == "not-cleared":
                    self.out.not_cleared.add(path)
        if not dropped and not replaced:
            return tree.id, False
        if not self.write:
            return tree.id, True
        builder = self.repo.TreeBuilder(tree)
        for name in dropped:
            builder.remove(name)
        for name, (oid, mode) in replaced.items():
            builder.insert(name, oid, mode)
        return builder.write(), True

    def _note_all(self, entry: pygit2.Object, path: str) -> None:
        """An entry dropped for its name: every file under it counts as purged."""
        if entry.type_str == "blob":
            self.out.blobs.add(entry.id)
            self.out.paths.add(path)
        elif entry.type_str == "tree":
            tree = self.repo[entry.id]
            assert isinstance(tree, pygit2.Tree)
            for child in tree:
                self._note_all(child, f"{path}/{child.name}")


def rewrite(repo: pygit2.Repository, matcher: Matcher, *, write: bool) -> Rewrite:
    """Rewrite (``write``) or measure every commit of every ref; refs are not moved."""
    out = Rewrite()
    trees = _Trees(repo, matcher, out, write)
    for commit in all_commits(repo):
        tree, tree_changed = trees.rewrite(commit.tree, "")
        parents = [out.commits.get(p, p) for p in commit.parent_ids]
        message = matcher.message(commit.raw_message)
        if message != commit.raw_message:
            out.messages += 1
        if not tree_changed and message == commit.raw_message and parents == commit.parent_ids:
            out.commits[commit.id] = commit.id
            continue
        out.changed.add(commit.id)
        if write:
            who, when = commit.author, commit.committer
            if commit.message_encoding:
                new = repo.create_commit(
                    None, who, when, message, tree, parents, commit.message_encoding
                )
            else:
                new = repo.create_commit(None, who, when, message, tree, parents)
        else:
            # A stand-in id that differs from the old one, so children count as changed.
            new = pygit2.Oid(raw=bytes(b ^ 0xFF for b in commit.id.raw))
        out.commits[commit.id] = new
    for name, target in commit_refs(repo).items():
        if target in out.changed:
            out.refs[name] = (target, out.commits[target])
    return out
