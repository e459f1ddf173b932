"""The gate every tree from outside the lane passes: the lane's rules on each entry.

The lane only ever writes names ``pathnames`` accepts, plain files and directories, at
most ``MAX_DEPTH`` levels deep. A tree that did not come through the lane (a restored
backup, a commit an owner made on main) is held to the same rules before anything is
materialised from it, and a checkout refuses what breaks them (``treefs``):

- every name storable and portable (``pathnames.name_rules``), and a single component:
  not empty, no ``/`` (``git fsck``: ``emptyName``, ``fullPathname``, ``hasDot``,
  ``hasDotdot``, ``hasDotgit``);
- only directories and regular files: no symbolic link, submodule (gitlink) or mode git
  does not write; on main, no executable file either;
- the tree well formed as ``git fsck --strict`` reads it (``gitfsck``), every object
  present and of the kind its entry says;
- directories at most ``MAX_DEPTH`` levels deep, files within ``max_file_chars``, and on
  main the whole tree within ``max_repo_bytes`` and ``MAX_FILES`` files.

The walk is iterative and visits each tree object once (a tree shared by many paths or
commits is read once, its totals reused), so a 5,000-level chain or a tree that expands
to billions of paths costs what its objects cost, never what its paths would.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, NamedTuple

import pygit2

from impyard.common.textcap import cut
from impyard.common.textsafe import visible
from impyard.knowledge.change import MESSAGE_CHARS, KnowledgeLimits
from impyard.knowledge.checkouts.treefs import MAX_FILES
from impyard.knowledge.store.gitfsck import TreeEntry, parse_tree
from impyard.knowledge.store.repo import TREE_CACHE_LIMIT
from impyard.knowledge.validation.pathnames import MAX_DEPTH, entry_name_rules, normalize_segment

#: Problems kept in full; the rest are counted (a hostile tree can hold millions).
MAX_PROBLEMS = 1_000

_TREE = pygit2.enums.ObjectType.TREE
_BLOB = pygit2.enums.ObjectType.BLOB
TREE_MODE = b"40000"


@dataclass(frozen=True)
class TreeProblem:
    """One thing a tree breaks. ``where`` names the tree: ``main``, a ref, or the commit or
    object id it was found in; ``path`` is from that tree's root (empty for the object)."""

    where: str
    path: str
    rule: str
    message: str

    def __post_init__(self) -> None:
        # A remote's tree entry may be named with a megabyte: the report stays bounded.
        for name in ("path", "message"):
            text = getattr(self, name)
            if len(text) > MESSAGE_CHARS:
                object.__setattr__(self, name, cut(text, MESSAGE_CHARS))

    def line(self) -> str:
        target = f"{self.where}:{self.path}" if self.path else self.where
        return f"{target}: {self.rule}: {self.message}"

    def as_dict(self) -> dict[str, str]:
        return {"where": self.where, "path": self.path, "rule": self.rule, "message": self.message}


@dataclass(frozen=True)
class GateLimits:
    #: A file on main (max_file_chars, as bytes).
    max_file_bytes: int
    #: A file any tree the host keeps may hold: a candidate keeps files over the limit,
    #: up to ``candidate_max_bytes``, for a retry under a raised one.
    max_kept_file_bytes: int
    max_repo_bytes: int
    max_files: int = MAX_FILES
    max_depth: int = MAX_DEPTH

    @classmethod
    def of(cls, limits: KnowledgeLimits) -> GateLimits:
        return cls(
            max_file_bytes=limits.max_file_bytes,
            max_kept_file_bytes=limits.max_file_bytes + limits.candidate_max_bytes,
            max_repo_bytes=limits.max_repo_bytes,
        )

    @property
    def max_object_bytes(self) -> int:
        """The largest object a tree the host keeps reads whole: a file a candidate keeps,
        or a tree libgit2 keeps parsed (what a restore fetches is held to it)."""
        return max(self.max_kept_file_bytes, TREE_CACHE_LIMIT)


FileSizes = Literal["main", "kept", "any"]


class Rules(NamedTuple):
    """Which rules beyond the names, modes and depth every tree is held to apply."""

    executable_ok: bool  # candidates keep a refused change's executable bit as it was
    clashes: bool  # two names one file on macOS/Windows (candidates may keep such a change)
    file_sizes: FileSizes  # which bound files are held to
    bounds: bool  # the whole tree within max_repo_bytes and MAX_FILES


#: Main's own tree: everything the lane keeps true of it.
MAIN_RULES = Rules(executable_ok=False, clashes=True, file_sizes="main", bounds=True)
#: Any other tree the host keeps (main's history, candidates, quarantine).
KEPT_RULES = Rules(executable_ok=True, clashes=False, file_sizes="kept", bounds=False)
#: What a checkout needs of a tree to write it: safe entries, and an end (a checkout
#: writes no executable bit, and file sizes are the lane's business).
CHECKOUT_RULES = Rules(executable_ok=True, clashes=False, file_sizes="any", bounds=True)


class Totals(NamedTuple):
    """What a tree holds, through every subtree: directory levels below it, files, bytes."""

    height: int
    files: int
    bytes: int


@dataclass
class Problems:
    """Problems found so far: the first ``MAX_PROBLEMS`` in full, the rest counted."""

    found: list[TreeProblem] = field(default_factory=list)
    omitted: int = 0

    def add(self, problem: TreeProblem) -> None:
        if len(self.found) < MAX_PROBLEMS:
            self.found.append(problem)
        else:
            self.omitted += 1

    def __bool__(self) -> bool:
        return bool(self.found)

    def lines(self) -> list[str]:
        more = [f"... and {self.omitted} more"] if self.omitted else []
        return [p.line() for p in self.found] + more


def _join(parent: str, raw: bytes) -> str:
    return f"{parent}/{shown_name(raw)}" if parent else shown_name(raw)


def shown_name(raw: bytes) -> str:
    """A tree entry's name as text fit for a terminal: bytes that are not UTF-8 and
    control characters escaped."""
    return visible(raw.decode("utf-8", "surrogateescape"))


class TreeWalk:
    """Walks trees of one repository by object id, each once, collecting problems.

    ``known`` holds trees already found clean by the checkout rules (with their totals):
    they are not read again, so it may only be given to walks under ``CHECKOUT_RULES``.
    A walk under stricter rules first lets later walks under laxer ones reuse its trees.
    """

    def __init__(
        self,
        repo: pygit2.Repository,
        limits: GateLimits,
        problems: Problems,
        known: dict[bytes, Totals] | None = None,
    ) -> None:
        self.repo = repo
        self.limits = limits
        self.problems = problems
        self.known: dict[bytes, Totals] = known if known is not None else {}
        #: Trees walked by this walk, clean or not, with their totals.
        self.totals: dict[bytes, Totals] = {}
        #: Trees found clean, everything below them too (depth aside: it is a tree's place).
        self.clean: dict[bytes, Totals] = {}
        self._dirty: set[bytes] = set()
        #: Trees of ``known`` this walk relied on.
        self.reused: set[bytes] = set()
        #: Executable entries in the trees this walk read (each tree object once), and
        #: the entries of the largest of them.
        self.executables = 0
        self.widest = 0
        self._blobs: dict[bytes, int] = {}
        self._file_bounds = {"main": limits.max_file_bytes, "kept": limits.max_kept_file_bytes}
        self._names: dict[tuple[bytes, bool], dict[str, str]] = {}
        self._entries: dict[tuple[TreeEntry, Rules], tuple[tuple[str, str], ...]] = {}

    def walk(self, root: bytes, where: str, rules: Rules) -> Totals | None:
        """Check the tree ``root`` and everything below it; its totals, or None when it
        cannot be read."""
        done = self._lookup(root)
        if done is None:
            self._descend(root, where, rules)
        elif done.height >= self.limits.max_depth:
            self._problem(where, "", "too-deep", self._too_deep(done.height))
        totals = self.known.get(root) or self.totals.get(root)
        if rules.bounds and totals is not None:
            self._bounds(totals, where)
        return totals

    def _descend(self, root: bytes, where: str, rules: Rules) -> None:
        # (tree, path, depth, entries): entries is None on the way down, the parsed
        # entries on the way back up, when every subtree's totals are known.
        stack: list[tuple[bytes, str, int, list[TreeEntry] | None]] = [(root, "", 0, None)]
        while stack:
            oid, path, depth, entries = stack.pop()
            if entries is not None:
                self._finish(oid, entries)
                continue
            read = self._read_tree(oid, where, path)
            if read is None:
                self._dirty.add(oid)
                continue
            stack.append((oid, path, depth, read))
            bad = False
            for entry in read:
                # An entry (name, mode, object) already checked elsewhere, in another
                # version of this directory say, says the same again: reported once.
                key = (entry, rules)
                found = self._entries.get(key)
                if found is None:
                    found = self._entries[key] = self._entry(entry, rules)
                    for rule, message in found:
                        self._problem(where, _join(path, entry.name), rule, message)
                bad = bad or bool(found)
                if entry.mode != TREE_MODE:
                    continue
                if depth + 1 >= self.limits.max_depth:
                    self._problem(where, _join(path, entry.name), "too-deep", self._too_deep(0))
                    bad = True
                    continue
                done = self._lookup(entry.oid)
                if done is None:
                    stack.append((entry.oid, _join(path, entry.name), depth + 1, None))
                elif depth + 1 + done.height >= self.limits.max_depth:
                    below = _join(path, entry.name)
                    self._problem(where, below, "too-deep", self._too_deep(done.height))
            if rules.clashes and self._clashes(read, where, path):
                bad = True
            if bad:
                self._dirty.add(oid)

    def _lookup(self, oid: bytes) -> Totals | None:
        """The totals of a tree already walked, or known."""
        done = self.totals.get(oid)
        if done is None and oid in self.known:
            done = self.known[oid]
            self.reused.add(oid)
        return done

    def has_seen(self, oid: bytes) -> bool:
        """Whether this walk already checked ``oid`` (a tree or a blob)."""
        return oid in self.totals or oid in self._blobs

    def check_object(self, oid: bytes, where: str) -> None:
        """Check one tree object alone: its form and each entry's name and mode, without
        following any entry (a tree no ref reaches has no place, so no depth)."""
        for entry in self._read_tree(oid, where, "") or ():
            for rule, message in self._entry(entry, KEPT_RULES):
                self._problem(where, shown_name(entry.name), rule, message)

    def _finish(self, oid: bytes, entries: list[TreeEntry]) -> None:
        height = files = size = 0
        bad = oid in self._dirty
        self.widest = max(self.widest, len(entries))
        for entry in entries:
            kind = entry.kind
            if kind == "tree":
                below = self.known.get(entry.oid) or self.totals.get(entry.oid)
                if below is None or entry.oid in self._dirty:
                    bad = True
                if below is not None:
                    height = max(height, below.height + 1)
                    files += below.files
                    size += below.bytes
            elif kind in ("file", "executable"):
                files += 1
                self.executables += kind == "executable"
                size += self._blobs.get(entry.oid, 0)
        totals = Totals(height, files, size)
        self.totals[oid] = totals
        if bad:
            self._dirty.add(oid)
        else:
            self.clean[oid] = totals

    def _entry(self, entry: TreeEntry, rules: Rules) -> tuple[tuple[str, str], ...]:
        """What one entry breaks by its name, mode and object: (rule, message) each."""
        kind = entry.kind
        found = list(self._name_rules(entry.name, kind == "tree").items())
        if kind in ("file", "executable"):
            if kind == "executable" and not rules.executable_ok:
                found.append(("executable", "files may not be executable"))
            blob = self._blob(entry.oid, rules.file_sizes)
            if blob is not None:
                found.append(blob)
        elif kind == "symlink":
            found.append(("symlink", "a symbolic link (mode 120000)"))
        elif kind == "gitlink":
            found.append(("special-file", "a submodule (gitlink, mode 160000)"))
        elif kind != "tree":
            mode = entry.mode.decode("ascii", "backslashreplace")
            found.append(("special-file", f"mode {mode} is not one git writes"))
        return tuple(found)

    def _name_rules(self, raw: bytes, directory: bool) -> dict[str, str]:
        key = (raw, directory)
        found = self._names.get(key)
        if found is None:
            found = self._names[key] = entry_name_rules(raw, directory=directory)
        return found

    def _read_tree(self, oid: bytes, where: str, path: str) -> list[TreeEntry] | None:
        odb = self.repo.odb
        target = pygit2.Oid(raw=oid)
        try:
            kind, size = odb.read_header(target)
            if kind != _TREE:
                self._problem(where, path, "bad-object", f"{target} is not a tree")
                return None
            if size > TREE_CACHE_LIMIT:
                self._problem(where, path, "bad-object", f"tree {target} is {size} bytes")
                return None
            data = odb.read(target)[1]
        except (KeyError, ValueError, pygit2.GitError):
            self._problem(where, path, "missing-object", f"tree {target} is not in the repository")
            return None
        entries, problems = parse_tree(data)
        for message in problems:
            self._problem(where, path, "bad-object", message)
        return entries

    def _blob(self, oid: bytes, sizes: FileSizes) -> tuple[str, str] | None:
        size = self._blobs.get(oid)
        if size is None:
            target = pygit2.Oid(raw=oid)
            try:
                kind, size = self.repo.odb.read_header(target)
            except (KeyError, ValueError, pygit2.GitError):
                return ("missing-object", f"blob {target} is not in the repository")
            if kind != _BLOB:
                return ("bad-object", f"{target} is not a blob")
            self._blobs[oid] = size
        limit = self._file_bounds.get(sizes)
        if limit is not None and size > limit:
            return ("file-too-large", f"{size} bytes, over {limit}")
        return None

    def _clashes(self, entries: list[TreeEntry], where: str, parent: str) -> bool:
        forms: dict[str, bytes] = {}
        found = False
        for entry in entries:
            form = normalize_segment(entry.name.decode("utf-8", "surrogateescape"))
            other = forms.setdefault(form, entry.name)
            if other != entry.name:
                message = f"one file with {shown_name(other)!r} on macOS/Windows"
                self._problem(where, _join(parent, entry.name), "name-clash", message)
                found = True
        return found

    def _bounds(self, totals: Totals, where: str) -> None:
        if totals.files > self.limits.max_files:
            self._problem(
                where, "", "repo-too-large", f"{totals.files} files, over {self.limits.max_files}"
            )
        if totals.bytes > self.limits.max_repo_bytes:
            self._problem(
                where,
                "",
                "repo-too-large",
                f"{totals.bytes} bytes; max_repo_bytes is {self.limits.max_repo_bytes}",
            )

    def _too_deep(self, below: int) -> str:
        more = f" (directories nest {below} more levels below)" if below else ""
        return f"more than {self.limits.max_depth} directory levels{more}"

    def _problem(self, where: str, path: str, rule: str, message: str) -> None:
        self.problems.add(TreeProblem(where, path, rule, message))
