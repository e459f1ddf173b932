"""Names a case-insensitive or Unicode-normalizing file system would merge.

A clone on macOS or Windows holds one file where main has two names that differ only
by case, Unicode form, ignorable code points or trailing dots/spaces. A change may not
add such a name beside an existing one; both checks below look only at the
directories the change writes into, never the whole tree.
"""

from __future__ import annotations

from collections.abc import Iterable

import pygit2

from impyard.knowledge.change import Change, Violation
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


def name_clashes(tree: pygit2.Tree, change: Change) -> list[Violation]:
    """New names the change writes that a case-insensitive or normalizing file system would
    merge with another name in the same directory (in ``tree`` or the change itself).

    Lists only the directories the change writes into (O(change) plus their entries);
    names already in ``tree`` are not this change's doing and are never reported.
    """
    found: list[Violation] = []
    for directory, ours in sorted(_names_by_directory(change.written).items()):
        by_form: dict[str, set[str]] = {}
        for name in ours:
            by_form.setdefault(normalize_segment(name), set()).add(name)
        entry = tree if not directory else lookup_entry(tree, directory)
        listing = (
            {str(child.name): child for child in entry} if isinstance(entry, pygit2.Tree) else {}
        )
        for name, child in listing.items():
            form = normalize_segment(name)
            if (
                form in by_form
                and name not in ours
                and _survives(child, _join(directory, name), change)
            ):
                by_form[form].add(name)
        found.extend(
            _clash(_join(directory, name), by_form[normalize_segment(name)] - {name})
            for name in sorted(ours)
            if name not in listing and len(by_form[normalize_segment(name)]) > 1
        )
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
        parts = path.split("/")
        for depth, name in enumerate(parts):
            directory = "/".join(parts[:depth])
            mine = forms.get((directory, normalize_segment(name)))
            if not mine or name in mine:
                continue
            if lookup_entry(tree, _join(directory, name)) is None:
                continue  # landed and removed again
            for own in mine:
                rivals.setdefault(_join(directory, own), set()).add(name)
    return [_clash(path, names) for path, names in sorted(rivals.items())]
