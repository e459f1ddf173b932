"""What a run changed, as the host saw it after the box was gone, and why it may be refused.

Shared vocabulary of the knowledge core: the snapshot produces a ``Change``,
validation and the lane consume it, and every refusal is a ``Violation``
naming a path and one of the ``RULES`` below.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from impyard.common.textcap import cut

if TYPE_CHECKING:
    from impyard.policy.models import KnowledgePolicy

Mode = Literal["append", "reorganize"]
Checkpoint = Literal["pending", "integrated", "empty", "rejected", "conflict", "quarantined"]

# Every rule a violation may name, with the sentence the README documents.
RULES: dict[str, str] = {
    "symlink": "symbolic links are never followed or stored",
    "special-file": "fifos, sockets and device nodes are never opened or stored",
    "hard-link": "a file with more than one link could alias content outside the change",
    "bad-name": "path is not valid UTF-8 or contains control characters",
    "path-escape": "path or id tries to leave its directory",
    "hidden-path": "path segments may not start with '.'",
    "git-metadata": "Git metadata (.git in any case or form) may not be written",
    "instruction-file": "runtime instruction files (AGENTS.md, CLAUDE.md, ...) may not be written",
    "executable": "files may not be executable",
    "file-too-large": "file exceeds max_file_chars",
    "not-utf8-text": "file is not UTF-8 text",
    "repo-too-large": "the resulting repository would exceed max_repo_bytes",
    "protected-path": "README.md and top-level paths other than records/ and organization/",
    "organization-in-append": "append runs may not write under organization/",
    "modified-existing": "existing records may not be modified",
    "deleted-existing": "existing records may not be deleted",
    "namespace": "record file name is outside the run's host-issued namespace",
    "bad-record-name": "record path is not records/<topic>/<slug>--<namespace>_<number>.md",
    "frontmatter": "record frontmatter is missing or invalid",
    "duplicate-id": "note id already used (in this run or on main)",
    "credential": "content looks like a credential",
    "unportable-name": (
        "Windows cannot hold the name (reserved device names such as con or lpt1, "
        'characters < > : " \\ | ? *, a trailing dot or space)'
    ),
    "name-clash": (
        "name differs from another in the same directory only by case, Unicode form, ignorable "
        "characters or trailing dots/spaces (one file on macOS/Windows)"
    ),
    "collision": "path was added to main by another run since this run's base",
    "too-deep": "directories nest deeper than the snapshot walks",
    "bad-object": (
        "an object git fsck --strict refuses: a malformed tree or commit, entries out of order "
        "or repeated, a zero-padded mode, a tag"
    ),
    "missing-object": "an object a ref, commit or tree names is not in the repository",
    "long-line": "a commit holds a line longer than the lane ever writes (256 KiB)",
    "checkpointed": "a file an earlier checkpoint of this run landed may not change any more",
    "source-receipt": (
        "a cited receipt is not one of this run's fetch receipts, or its URL is not one of the "
        "note's source_urls"
    ),
}


#: Characters of a violation's message kept. A message quotes what the box wrote (a
#: frontmatter key, a value, a second path): a path as long as Linux's PATH_MAX (4,096
#: bytes) and the sentence around it fit; a 60,000-character
#: frontmatter key does not, and would be copied into the manifest, the journal, the
#: candidate's commit message and a rework's task file.
MESSAGE_CHARS = 5_000


@dataclass(frozen=True)
class Violation:
    """One reason a change is refused; its message cut to ``MESSAGE_CHARS`` (the cut says
    how much), so every copy of it is bounded wherever it is stored or shown."""

    path: str
    rule: str
    message: str

    def __post_init__(self) -> None:
        if len(self.message) > MESSAGE_CHARS:
            object.__setattr__(self, "message", cut(self.message, MESSAGE_CHARS))

    def as_dict(self) -> dict[str, str]:
        return {"path": self.path, "rule": self.rule, "message": self.message}


@dataclass(frozen=True)
class FileState:
    """A regular file the run left, already hashed into the canonical repository's odb."""

    blob: str
    size: int
    executable: bool


@dataclass
class Change:
    """A run's change relative to its base commit (paths are POSIX, relative to the checkout).

    ``written`` holds files whose content or mode differs from base (new or rewritten);
    ``deleted`` holds base files that are gone; ``problems`` holds entries the snapshot
    refused to read (links, special files, bad names, files over the size limit a
    check does not keep or past ``candidate_max_bytes``), which always reject a clean-exit
    checkpoint and are listed as not kept, never stored, by a candidate or quarantine.
    """

    written: dict[str, FileState] = field(default_factory=dict)
    deleted: set[str] = field(default_factory=set)
    problems: list[Violation] = field(default_factory=list)
    #: Contents a check held in memory instead of writing them to the odb (hex oid → bytes).
    unstored: dict[str, bytes] = field(default_factory=dict)

    @property
    def is_empty(self) -> bool:
        return not self.written and not self.deleted and not self.problems


@dataclass(frozen=True)
class KnowledgeLimits:
    """The effective knowledge limits of one imp (from compiled policy)."""

    max_file_chars: int = 200_000
    max_repo_bytes: int = 1_000_000_000
    #: Most bytes of files over ``max_file_bytes`` one snapshot reads and keeps, so a
    #: candidate or quarantine holds what a retry under a raised limit could land.
    candidate_max_bytes: int = 100_000_000
    #: Which runs may land anything: under ``clean-room`` a tainted run (one carrying
    #: conversation content) lands nothing (``tainted_refusal``).
    write_from: str = "clean-room"
    #: Most files a run's change may delete and land without the owner's approval (None:
    #: no gate, an approved change; ``bulkdelete``).
    max_deletions: int | None = 20

    @classmethod
    def of(cls, policy: KnowledgePolicy) -> KnowledgeLimits:
        """The limits an imp's effective ``[knowledge]`` policy sets (a candidate never keeps
        more than the repository could hold)."""
        return cls(
            max_file_chars=policy.max_file_chars,
            max_repo_bytes=policy.max_repo_bytes,
            candidate_max_bytes=min(policy.candidate_max_bytes, policy.max_repo_bytes),
            write_from=policy.write_from,
            max_deletions=policy.max_deletions,
        )

    @property
    def max_file_bytes(self) -> int:
        """No UTF-8 text of max_file_chars characters is longer than this many bytes."""
        return 4 * self.max_file_chars
