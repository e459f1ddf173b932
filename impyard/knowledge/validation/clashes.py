"""Names a case-insensitive or Unicode-normalizing file system would merge.

A clone on macOS or Windows holds one file where main has two names that differ only
by case, Unicode form, ignorable code points or trailing dots/spaces. A change may not
add such a name beside an existing one; both checks below look only at the
directories the change writes into, never the whole tree.
"""

from __future__ import annotations

import threading
from array import array
from bisect import bisect_left, bisect_right, insort
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping

import pygit2

from impyard.knowledge.change import Change, Violation
from impyard.knowledge.store.gitcalls import tree_has
from impyard.knowledge.store.gitobj import lookup_entry
from impyard.knowledge.validation.pathnames import normalize_segment


def _names_by_directory(paths: Iterable[str]) -> dict[str, set[str]]:
    """Every name the paths put in each directory ('' is the top level)."""
    names: dict[str, set[str]] = {}
    for path in paths:
        parts = path.split("/")
        for depth, name in enumerate(parts):
            names.setdefault("/".join(parts[:depth]), set()).add(name)
    return names


def _join(directory: str, name: str) -> str:
    return f"{directory}/{name}" if directory else name


def _clash(path: str, rivals: Iterable[str]) -> Violation:
    directory, _, name = path.rpartition("/")
    where = f"{directory}/" if directory else "the top level"
    listed = ", ".join(repr(rival) for rival in sorted(rivals))
    return Violation(
        path,
        "name-clash",
        f"{name!r} differs from {listed} in {where} only by case, Unicode form, ignorable "
        "characters or trailing dots/spaces; a macOS or Windows clone would see one name",
    )


def _survives(entry: pygit2.Object, path: str, change: Change) -> bool:
    """Whether a base entry the change does not write is still there after the change."""
    if not isinstance(entry, pygit2.Tree):
        return path not in change.deleted
    # Only reached for a rival name (rare), so walking its subtree stays off the common path.
    return any(_survives(child, f"{path}/{child.name}", change) for child in entry)


class _DirectoryForms:
    """Each directory's name forms, per tree id, as one sorted array of their hashes (one
    per name): a tree never changes, so neither does its index.

    Without it every run writing into a topic of 1,000 records listed and normalized all
    1,000 names (~1 ms, most of validating a one-note change); runs share their base, so
    its directories are indexed once, and the lane carries each index to the directory's
    next version. Eight bytes a name, and no object the cyclic collector must visit, so
    the bound holds every topic of a 100,000-record imp in 1 MiB. A hash says only that a
    name of that form may be there; the names themselves are read from the tree, and only
    when something other than the change's own names has the form (a rare clash)."""

    def __init__(self, max_names: int) -> None:
        self._max = max_names
        self._lock = threading.Lock()
        self._known: OrderedDict[bytes, array[int]] = OrderedDict()
        self._names = 0

    def of(self, tree: pygit2.Tree) -> array[int]:
        """``tree``'s form hashes, sorted."""
        key = tree.id.raw
        with self._lock:
            known = self._known.get(key)
            if known is not None:
                self._known.move_to_end(key)
                return known
        hashes = array("q", sorted(hash(normalize_segment(name)) for name in _names(tree)))
        self._store(key, hashes)
        return hashes

    def named(self, tree: pygit2.Tree, form: str, ours: Iterable[str]) -> tuple[str, ...]:
        """The names in ``tree`` whose form is ``form``. ``ours`` (names of that form the
        caller writes) are looked up directly: when they account for every name of that
        form, the directory is not listed."""
        hashes = self.of(tree)
        key = hash(form)
        first = bisect_left(hashes, key)
        count = bisect_right(hashes, key, first) - first
        if count == 0:
            return ()
        present = tuple(name for name in ours if tree_has(tree, name))
        if len(present) == count:
            return present
        return tuple(name for name in _names(tree) if normalize_segment(name) == form)

    def carry(self, old: bytes, new: bytes, came: Mapping[str, bool]) -> None:
        """Index tree ``new`` from the index of tree ``old`` (if there is one), a version of
        the same directory that differs from it by the names ``came`` (True: in ``new`` but
        not ``old``; False: the other way round), and forget ``old``: main has moved past
        it, so only runs that started before are based on it (they index it again once).
        Otherwise every version the lane made of a directory stayed, each a copy of its
        whole index, until the bound."""
        with self._lock:
            known = self._known.get(old)
            if known is None or new in self._known:
                return
        hashes = array("q", known)
        for name, there in came.items():
            key = hash(normalize_segment(name))
            if there:
                insort(hashes, key)
            else:
                del hashes[bisect_left(hashes, key)]
        self._store(new, hashes)
        with self._lock:
            dropped = self._known.pop(old, None)
            if dropped is not None:
                self._names -= len(dropped)

    def _store(self, key: bytes, hashes: array[int]) -> None:
        with self._lock:
            if key not in self._known:
                self._known[key] = hashes
                self._names += len(hashes)
            while self._names > self._max and len(self._known) > 1:
                _, dropped = self._known.popitem(last=False)
                self._names -= len(dropped)


def _names(tree: pygit2.Tree) -> Iterator[str]:
    return (str(child.name) for child in tree)


#: 262,144 names (2 MiB at most): the bases of the runs in flight, and each directory's
#: latest version, for imps of 100,000 records and more.
_FORMS = _DirectoryForms(max_names=1 << 18)


def carry_name_forms(old: bytes, new: bytes, came: Mapping[str, bool]) -> None:
    """Tree ``new``, a directory the lane changed from tree ``old`` by the names ``came``
    (True: added, False: removed), gets its name-form index from ``old``'s: O(changed),
    where indexing it afresh costs its width."""
    _FORMS.carry(old, new, came)


def name_clashes(tree: pygit2.Tree, change: Change) -> list[Violation]:
    """New names the change writes that a case-insensitive or normalizing file system would
    merge with another name in the same directory (in ``tree`` or the change itself).

    Looks only at the directories the change writes into (O(change), plus their entries
    the first time a directory is seen); names already in ``tree`` are not this change's
    doing and are never reported.
    """
    found: list[Violation] = []
    for directory, ours in sorted(_names_by_directory(change.written).items()):
        by_form: dict[str, set[str]] = {}
        for name in ours:
            by_form.setdefault(normalize_segment(name), set()).add(name)
        entry = tree if not directory else lookup_entry(tree, directory)
        listed: dict[str, tuple[str, ...]] = {}
        for form, names in by_form.items():
            if not isinstance(entry, pygit2.Tree):
                listed[form] = ()
                continue
            listed[form] = _FORMS.named(entry, form, tuple(names))
            for name in listed[form]:
                if name not in ours and _survives(entry[name], _join(directory, name), change):
                    names.add(name)
        for name in sorted(ours):
            form = normalize_segment(name)
            rivals = by_form[form] - {name}
            if rivals and name not in listed[form]:
                found.append(_clash(_join(directory, name), rivals))
    return found


def landed_name_clashes(
    tree: pygit2.Tree, landed: Iterable[str], change: Change
) -> list[Violation]:
    """``name_clashes`` against paths that reached ``tree`` after the change's base.

    O(landed paths x depth): the lane already has those paths, so no directory is listed.
    """
    ours = _names_by_directory(change.written)
    forms: dict[tuple[str, str], set[str]] = {}
    for directory, names in ours.items():
        for name in names:
            forms.setdefault((directory, normalize_segment(name)), set()).add(name)
    rivals: dict[str, set[str]] = {}
    for path in landed:
        directory = ""
        for name in path.split("/"):
            if directory not in ours:
                break  # the change writes nothing here, nor anywhere below
            mine = forms.get((directory, normalize_segment(name)))
            here, directory = directory, _join(directory, name)
            if not mine or name in mine:
                continue
            if lookup_entry(tree, directory) is None:
                continue  # landed and removed again
            for own in mine:
                rivals.setdefault(_join(here, own), set()).add(name)
    return [_clash(path, names) for path, names in sorted(rivals.items())]
