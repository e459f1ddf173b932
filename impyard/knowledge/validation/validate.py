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

Cited receipts are looked up in the run's receipts the caller passes (none
known: every citation is refused); see ``citations``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import cast

import pygit2

from impyard.common.errors import KnowledgeError
from impyard.credentials import find_credentials
from impyard.knowledge.change import Change, FileState, KnowledgeLimits, Mode, Violation
from impyard.knowledge.store.gitobj import lookup_entry
from impyard.knowledge.store.repo import TREE_MODE
from impyard.knowledge.validation.citations import Citation, Receipts, cite
from impyard.knowledge.validation.clashes import landed_name_clashes, name_clashes
from impyard.knowledge.validation.pathnames import (
    INSTRUCTION_DIRS,
    INSTRUCTION_FILES,
    is_storable_path,
    normalize_segment,
    path_violations,
)
from impyard.knowledge.validation.records import (
    ORGANIZATION,
    RECORDS,
    check_frontmatter,
    parse_record_path,
    record_name_shape,
)
from impyard.knowledge.validation.sizes import size_delta, tree_bytes

REPO_PATH = "."  # the path a repository-wide violation names

__all__ = [
    "INSTRUCTION_DIRS",
    "INSTRUCTION_FILES",
    "REPO_PATH",
    "Checked",
    "check_change",
    "is_storable_path",
    "landed_name_clashes",
    "name_clashes",
    "normalize_segment",
    "path_violations",
    "read_text",
    "validate",
]


def read_text(
    repo: pygit2.Repository,
    path: str,
    state: FileState,
    limits: KnowledgeLimits,
    unstored: dict[str, bytes] | None = None,
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
    held = unstored.get(state.blob) if unstored else None
    try:
        data = held if held is not None else cast(pygit2.Blob, repo[state.blob]).data
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


@dataclass
class Checked:
    """What validation found: every violation, and the receipts each added record cites."""

    violations: list[Violation] = field(default_factory=list)
    #: record path -> the citations of it that hold (only records the change adds).
    citations: dict[str, list[Citation]] = field(default_factory=dict)


def validate(
    repo: pygit2.Repository,
    base: str,
    change: Change,
    *,
    namespace: str,
    mode: Mode,
    limits: KnowledgeLimits,
    receipts: Receipts | None = None,
) -> list[Violation]:
    """Every violation of ``change`` against ``base`` in ``mode``; empty means acceptable.

    ``receipts`` are the run's fetch receipts by id (default: none, so any citation is
    refused)."""
    return check_change(
        repo, base, change, namespace=namespace, mode=mode, limits=limits, receipts=receipts
    ).violations


def check_change(
    repo: pygit2.Repository,
    base: str,
    change: Change,
    *,
    namespace: str,
    mode: Mode,
    limits: KnowledgeLimits,
    receipts: Receipts | None = None,
) -> Checked:
    """``validate``, keeping the citations too (the lane writes them into its commit)."""
    try:
        base_tree = repo[base].peel(pygit2.Tree)
    except (KeyError, ValueError, pygit2.GitError) as exc:
        raise KnowledgeError(f"base commit {base} is not in the repository") from exc
    checked = Checked(violations=list(change.problems))
    violations = checked.violations
    seen_ids: dict[str, str] = {}
    known: Receipts = receipts if receipts is not None else {}

    for path in sorted(change.written):
        state = change.written[path]
        found = path_violations(path)
        found.extend(_placement(path, mode, base_tree, deleting=False))
        if state.executable:
            found.append(Violation(path, "executable", "file mode is executable (use 0644)"))
        text, content = read_text(repo, path, state, limits, change.unstored)
        found.extend(content)
        if text is not None:
            found.extend(
                Violation(path, "credential", f"content looks like a {label}")
                for label in find_credentials(text)
            )
        if path.startswith(RECORDS + "/") and lookup_entry(base_tree, path) is None:
            found.extend(_record(path, text, namespace, seen_ids, known, checked.citations))
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
    return checked


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
    path: str,
    text: str | None,
    namespace: str,
    seen_ids: dict[str, str],
    receipts: Receipts,
    citations: dict[str, list[Citation]],
) -> list[Violation]:
    """Rules for a record the run added: name, namespace, frontmatter, unique id, cited
    receipts (the citations that hold go into ``citations``).

    A bad name does not stop the other checks: a fix has to deal with all of them, and
    a listing that hid a frontmatter error behind the name cost a second round."""
    found: list[Violation] = []
    name = parse_record_path(path)
    shape = record_name_shape(path)
    claimed = name.namespace if name is not None else shape.namespace
    if claimed is not None and claimed != namespace:
        found.append(
            Violation(
                path,
                "namespace",
                f"file name claims namespace {claimed!r}; this run's namespace is {namespace!r}",
            )
        )
    if name is None and (shape.faults or not found):
        said = "; ".join(shape.faults) or "the name does not have the record shape"
        found.append(
            Violation(
                path,
                "bad-record-name",
                f"{said}; expected records/<topic>/<slug>--{namespace}_<n>.md "
                "(topic and slug in lowercase a-z, 0-9 and '-')",
            )
        )
    expected_id: str | None = None
    if name is not None and name.namespace == namespace:
        expected_id = name.note_id
        first = seen_ids.setdefault(name.note_id, path)
        if first != path:
            found.append(
                Violation(path, "duplicate-id", f"id {name.note_id} is also used by {first}")
            )
    if text is not None:
        front = check_frontmatter(text, expected_id)
        if front.escape:
            found.append(Violation(path, "path-escape", "frontmatter id contains '/' or '..'"))
        found.extend(Violation(path, "frontmatter", error) for error in front.errors)
        held, refused = cite(
            path, front.source_receipts, front.source_urls, receipts, front.partial_receipts
        )
        found.extend(refused)
        if held:
            citations[path] = held
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
