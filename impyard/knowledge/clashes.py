"""Names a case-insensitive or Unicode-normalizing file system would merge.

A clone on macOS or Windows holds one file where main has two names that differ only
by case, Unicode form, ignorable code points or trailing dots/spaces. A change may not
add such a name beside an existing one; both checks below look only at the
directories the change writes into, never the whole tree.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable
from typing import cast

import pygit2

from impyard.knowledge.change import Change, Violation
from impyard.knowledge.gitcalls import tree_has
from impyard.knowledge.gitobj import lookup_entry
from impyard.knowledge.pathnames import normalize_segment


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
    """Each directory's names by name form, per tree id: a tree never changes, so neither
    does its index. Without it every run writing into a topic of 1,000 records listed and
    normalized all 1,000 names (~1 ms, most of validating a one-note change); runs share
    their base, so its directories are indexed once. Bounded by names held in all."""

    def __init__(self, max_names: int) -> None:
        self._max = max_names
        self._lock = threading.Lock()
        self._known: OrderedDict[bytes, dict[str, tuple[str, ...]]] = OrderedDict()
        self._sizes: dict[bytes, int] = {}
        self._names = 0

    def of(self, tree: pygit2.Tree) -> dict[str, tuple[str, ...]]:
        key = tree.id.raw
        with self._lock:
            known = self._known.get(key)
            if known is not None:
                self._known.move_to_end(key)
                return known
        grouped: dict[str, list[str]] = {}
        for child in tree:
            name = str(child.name)
            grouped.setdefault(normalize_segment(name), []).append(name)
        forms = {form: tuple(names) for form, names in grouped.items()}
        self._store(key, forms, len(tree))
        return forms

    def carry(self, old: bytes, new: pygit2.Tree, changed: Iterable[str]) -> None:
        """Index ``new`` from the index of ``old`` (if there is one), a version of the same
        directory whose entries differ from it only by the names ``changed``, and forget
        ``old``: main has moved past it, so only runs that started before are based on it
        (they index it again once). Otherwise every version the lane made of a directory
        stayed, each a copy of its whole index: a topic growing by one name a run held
        the sum of its sizes, until the bound."""
        with self._lock:
            known = self._known.get(old)
            if known is None or new.id.raw in self._known:
                return
        grouped = dict(known)
        for name in changed:
            form = normalize_segment(name)
            names = grouped.get(form, ())
            present = tree_has(new, name)
            if present and name not in names:
                grouped[form] = (*names, name)
            elif not present and name in names:
                grouped[form] = tuple(n for n in names if n != name)
                if not grouped[form]:
                    del grouped[form]
        self._store(new.id.raw, grouped, len(new))
        with self._lock:
            if self._known.pop(old, None) is not None:
                self._names -= self._sizes.pop(old)

    def _store(self, key: bytes, forms: dict[str, tuple[str, ...]], names: int) -> None:
        with self._lock:
            if key not in self._known:
                self._known[key], self._sizes[key] = forms, names
                self._names += names
            while self._names > self._max and len(self._known) > 1:
                dropped, _ = self._known.popitem(last=False)
                self._names -= self._sizes.pop(dropped)


#: 32,768 names (~3 MiB at most): the bases of the runs in flight, each directory's latest
#: version, and a topic of 1,000 records many times over.
_FORMS = _DirectoryForms(max_names=1 << 15)


def carry_name_forms(old: bytes, new: pygit2.Tree, changed: Iterable[str]) -> None:
    """``new``, a directory the lane changed from ``old`` by the names ``changed``, gets its
    name-form index from ``old``'s: O(changed), where indexing it afresh costs its width."""
    _FORMS.carry(old, new, changed)


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
        listed = _FORMS.of(entry) if isinstance(entry, pygit2.Tree) else {}
        for form, names in by_form.items():
            for name in listed.get(form, ()):
                if name not in ours and _survives(
                    cast(pygit2.Tree, entry)[name], _join(directory, name), change
                ):
                    names.add(name)
        for name in sorted(ours):
            rivals = by_form[normalize_segment(name)] - {name}
            if rivals and name not in listed.get(normalize_segment(name), ()):
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
