"""Validation of a run's change against its base: every violation, never just the first.

Why each rule exists is in ``change.RULES``; this module decides which apply.

Duplicate ids without scanning 100,000 records
----------------------------------------------
A note id is ``<namespace>_<number>`` and (by the record-name rule) is spelled
in the note's file name, which must be in the run's namespace; namespaces are
host-issued per run and never reused. Every record on ``main`` got there
through the lane, which enforced the same rule for the run that added it. So:

- no record at ``base`` can carry this run's namespace unless the host reused a
  namespace (it does not); the only same-path clash left is checked by an
  O(depth) lookup of each added path in the base tree;
- within the run, ids are compared among the run's own added records;
- records that reached ``main`` after ``base`` are checked by the lane, which
  diffs only the commits between ``base`` and the new head (O(their changes)).

Names one file system would merge
---------------------------------
A clone on macOS or Windows folds case, Unicode form, ignorable code points and
trailing dots/spaces, so two names equal under ``normalize_segment`` become one
file there. Each new name is compared only with its siblings: validation lists
just the directories the change writes into, and the lane compares the paths
that landed since ``base`` (which it already has), so neither walks the tree.

Repository size is the sum of blob sizes in the resulting tree: a per-commit
cache (``repo.tree_bytes``) gives the base total and the change adds its delta,
so the check is O(change) too.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable
from typing import cast

import pygit2

from impyard.credentials import find_credentials
from impyard.errors import KnowledgeError
from impyard.knowledge.change import Change, FileState, KnowledgeLimits, Mode, Violation
from impyard.knowledge.gitobj import lookup_entry
from impyard.knowledge.records import (
    ORGANIZATION,
    RECORDS,
    claimed_namespace,
    frontmatter_errors,
    parse_record_path,
)
from impyard.knowledge.repo import TREE_MODE, size_delta, tree_bytes

REPO_PATH = "."  # the path a repository-wide violation names

# Runtime instruction files: names an agent runtime (Codex, Claude Code, Gemini
# CLI, Cursor, Copilot, Windsurf, Cline, Aider, Goose, Roo, ...) reads as
# instructions when it starts in a directory. Knowledge must never change
# runtime instructions (SPEC, security invariants), so these are refused
# anywhere in the tree, in any case, with trailing dots/spaces ignored.
# This is the one list; add new runtimes here.
INSTRUCTION_FILES: frozenset[str] = frozenset(
    {
        "agents.md",
        "agents.override.md",
        "agent.md",
        "claude.md",
        "claude.local.md",
        "gemini.md",
        "codex.md",
        "copilot-instructions.md",
        ".cursorrules",
        ".windsurfrules",
        ".clinerules",
        ".roorules",
        ".goosehints",
        ".aider.conf.yml",
        ".aiderignore",
        ".mcp.json",
    }
)
# Directories whose content such runtimes load (rules, hooks, settings, workflows).
INSTRUCTION_DIRS: frozenset[str] = frozenset(
    {
        ".github",
        ".claude",
        ".cursor",
        ".gemini",
        ".codex",
        ".windsurf",
        ".clinerules",
        ".roo",
        ".continue",
        ".kiro",
        ".vscode",
        ".devcontainer",
        ".agents",
    }
)

# Code points HFS+ ignores in names, so ".g\u200cit" is ".git" there (git fsck knows too).
_IGNORABLE = frozenset(
    [*range(0x200C, 0x2010), *range(0x202A, 0x202F), *range(0x206A, 0x2070), 0xFEFF]
)

# Names Windows maps to devices whatever the extension (git's is_valid_win32_path, plus
# the 0 and superscript forms Microsoft documents); a clone there cannot hold them.
_WINDOWS_DEVICES: frozenset[str] = frozenset(
    {"con", "prn", "aux", "nul", "conin$", "conout$"}
    | {f"{port}{n}" for port in ("com", "lpt") for n in "0123456789\u00b9\u00b2\u00b3"}
)
_WINDOWS_RESERVED_CHARACTERS = '<>:"\\|?*'

_PATH_RULES = (
    "bad-name",
    "path-escape",
    "git-metadata",
    "hidden-path",
    "instruction-file",
    "unportable-name",
)


def normalize_segment(segment: str) -> str:
    """How case-insensitive, trailing-dot/space-stripping filesystems would see a name."""
    if segment.isascii():  # the common case, and casefold/NFC change nothing else there
        return segment.lower().rstrip(" .")
    cleaned = "".join(ch for ch in segment if ord(ch) not in _IGNORABLE)
    folded = unicodedata.normalize("NFC", cleaned).casefold()
    return unicodedata.normalize("NFC", folded).rstrip(" .")


def _unportable(segment: str) -> str | None:
    """Why Windows could not hold this name, if it could not."""
    reserved = next((ch for ch in segment if ch in _WINDOWS_RESERVED_CHARACTERS), None)
    if reserved is not None:
        return f"{segment!r} contains {reserved!r}, which Windows does not allow in names"
    if segment.endswith((".", " ")):
        return f"{segment!r} ends with a dot or space, which Windows drops"
    if segment.split(".", 1)[0].rstrip(" ").lower() in _WINDOWS_DEVICES:
        return f"{segment!r} is a reserved device name on Windows"
    return None


def path_violations(path: str) -> list[Violation]:
    """Rules a path breaks by its name alone (one violation per rule)."""
    found: dict[str, str] = {}
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        found["bad-name"] = "path is not valid UTF-8"
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in path):
        found["bad-name"] = "path contains control characters"
    if path.startswith("/") or "\\" in path:
        found["path-escape"] = "path must be relative and use '/' only"
    segments = path.split("/")
    for index, segment in enumerate(segments):
        norm = normalize_segment(segment)
        last = index == len(segments) - 1
        if segment in ("", ".", ".."):
            found.setdefault("path-escape", f"path segment {segment!r} is not allowed")
            continue
        if norm == ".git" or norm.startswith(".git") or norm == "git~1":
            found.setdefault("git-metadata", f"{segment!r} is Git metadata")
        elif segment.startswith(".") or norm.startswith("."):
            found.setdefault("hidden-path", f"hidden path segment {segment!r}")
        if (last and norm in INSTRUCTION_FILES) or (not last and norm in INSTRUCTION_DIRS):
            found.setdefault("instruction-file", f"{segment!r} is a runtime instruction file")
        unportable = _unportable(segment)
        if unportable is not None:
            found.setdefault("unportable-name", unportable)
    return [Violation(path, rule, found[rule]) for rule in _PATH_RULES if rule in found]


def is_storable_path(path: str) -> bool:
    """Whether a path may appear in any tree the host writes (candidate, quarantine, main)."""
    return not path_violations(path)


def read_text(
    repo: pygit2.Repository, path: str, state: FileState, limits: KnowledgeLimits
) -> tuple[str | None, list[Violation]]:
    """The file's text, or the reasons it is not acceptable text (size checked before reading)."""
    if state.size > limits.max_file_bytes:
        return None, [
            Violation(
                path,
                "file-too-large",
                f"{state.size} bytes exceeds max_file_chars ({limits.max_file_chars} characters)",
            )
        ]
    try:
        data = cast(pygit2.Blob, repo[state.blob]).data
    except (KeyError, ValueError) as exc:
        raise KnowledgeError(f"{path}: blob {state.blob} is not in the repository") from exc
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, [Violation(path, "not-utf8-text", f"not valid UTF-8 at byte {exc.start}")]
    if "\x00" in text:
        return None, [Violation(path, "not-utf8-text", "contains NUL bytes (binary data)")]
    if len(text) > limits.max_file_chars:
        return None, [
            Violation(
                path,
                "file-too-large",
                f"{len(text)} characters exceeds max_file_chars ({limits.max_file_chars})",
            )
        ]
    return text, []


def validate(
    repo: pygit2.Repository,
    base: str,
    change: Change,
    *,
    namespace: str,
    mode: Mode,
    limits: KnowledgeLimits,
) -> list[Violation]:
    """Every violation of ``change`` against ``base`` in ``mode``; empty means acceptable."""
    try:
        base_tree = repo[base].peel(pygit2.Tree)
    except (KeyError, ValueError, pygit2.GitError) as exc:
        raise KnowledgeError(f"base commit {base} is not in the repository") from exc
    violations: list[Violation] = list(change.problems)
    seen_ids: dict[str, str] = {}

    for path in sorted(change.written):
        state = change.written[path]
        found = path_violations(path)
        found.extend(_placement(path, mode, base_tree, deleting=False))
        if state.executable:
            found.append(Violation(path, "executable", "file mode is executable (use 0644)"))
        text, content = read_text(repo, path, state, limits)
        found.extend(content)
        if text is not None:
            found.extend(
                Violation(path, "credential", f"content looks like a {label}")
                for label in find_credentials(text)
            )
        if path.startswith(RECORDS + "/") and lookup_entry(base_tree, path) is None:
            found.extend(_record(path, text, namespace, seen_ids))
        violations.extend(found)

    for path in sorted(change.deleted):
        violations.extend(_placement(path, mode, base_tree, deleting=True))

    violations.extend(_file_directory_clashes(base_tree, change))
    violations.extend(name_clashes(base_tree, change))

    total = tree_bytes(repo, base) + size_delta(repo, base_tree, change.written, change.deleted)
    if total > limits.max_repo_bytes:
        violations.append(
            Violation(
                REPO_PATH,
                "repo-too-large",
                f"resulting repository would hold {total} bytes; max_repo_bytes is "
                f"{limits.max_repo_bytes}",
            )
        )
    return violations


def _placement(path: str, mode: Mode, base_tree: pygit2.Tree, *, deleting: bool) -> list[Violation]:
    """Where a path may be written or deleted, given the mode."""
    top = path.split("/", 1)[0]
    nested = "/" in path
    if top == RECORDS and nested:
        if lookup_entry(base_tree, path) is None:
            return []
        if deleting:
            return [Violation(path, "deleted-existing", "existing records may not be deleted")]
        return [Violation(path, "modified-existing", "existing records may not be modified")]
    if top == ORGANIZATION and nested:
        if mode == "append":
            return [
                Violation(
                    path, "organization-in-append", "append runs may not write under organization/"
                )
            ]
        return []
    what = (
        "README.md is maintained by the host"
        if path == "README.md"
        else ("only records/ and organization/ may change")
    )
    return [Violation(path, "protected-path", what)]


def _record(
    path: str, text: str | None, namespace: str, seen_ids: dict[str, str]
) -> list[Violation]:
    """Rules for a record the run added: name, namespace, frontmatter, unique id."""
    name = parse_record_path(path)
    if name is None:
        claimed = claimed_namespace(path)
        if claimed is not None and claimed != namespace:
            return [
                Violation(
                    path,
                    "namespace",
                    f"file name claims namespace {claimed!r}; "
                    f"this run's namespace is {namespace!r}",
                )
            ]
        return [
            Violation(
                path, "bad-record-name", f"must be records/<topic>/<slug>--{namespace}_<number>.md"
            )
        ]
    if name.namespace != namespace:
        return [
            Violation(
                path,
                "namespace",
                f"file name claims namespace {name.namespace!r}; "
                f"this run's namespace is {namespace!r}",
            )
        ]
    found: list[Violation] = []
    first = seen_ids.setdefault(name.note_id, path)
    if first != path:
        found.append(Violation(path, "duplicate-id", f"id {name.note_id} is also used by {first}"))
    if text is not None:
        errors, escape = frontmatter_errors(text, name.note_id)
        if escape:
            found.append(Violation(path, "path-escape", "frontmatter id contains '/' or '..'"))
        found.extend(Violation(path, "frontmatter", error) for error in errors)
    return found


def _file_directory_clashes(base_tree: pygit2.Tree, change: Change) -> list[Violation]:
    """A written path whose ancestor is a file (in the change, or at base and kept): O(depth)."""
    found: list[Violation] = []
    for path in sorted(change.written):
        parts = path.split("/")
        for depth in range(1, len(parts)):
            ancestor = "/".join(parts[:depth])
            entry = lookup_entry(base_tree, ancestor)
            at_base = entry is not None and entry.filemode != TREE_MODE
            if ancestor in change.written or (at_base and ancestor not in change.deleted):
                found.append(
                    Violation(ancestor, "collision", f"is a file, but {path} needs a directory")
                )
                break
    return found


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
