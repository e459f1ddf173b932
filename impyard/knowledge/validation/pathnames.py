"""Rules a path breaks by its name alone, in every mode and for every tree the host
writes (main, candidates, quarantine): not UTF-8 or control characters, escaping the
tree, hidden segments, Git metadata in any disguise, agent instruction files, and names
Windows cannot hold.
"""

from __future__ import annotations

import re
import unicodedata

from impyard.knowledge.change import Violation

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
        # OpenCode: CONTEXT.md is read beside AGENTS.md, also from each directory
        # between a file its read tool opens and the checkout's root; opencode.json is
        # its project config.
        "context.md",
        "opencode.json",
        "opencode.jsonc",
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
_RESERVED = re.compile("[" + re.escape(_WINDOWS_RESERVED_CHARACTERS) + "]")
_PLAIN = re.compile("[A-Za-z0-9_-][A-Za-z0-9_.-]*")
_PLAIN_BYTES = re.compile(_PLAIN.pattern.encode())
_INSTRUCTION_FILES_BYTES = frozenset(name.encode() for name in INSTRUCTION_FILES)
_INSTRUCTION_DIRS_BYTES = frozenset(name.encode() for name in INSTRUCTION_DIRS)
# A plain name is ASCII: only the ASCII device names can be its stem.
_WINDOWS_DEVICES_BYTES = frozenset(name.encode() for name in _WINDOWS_DEVICES if name.isascii())
# C0 controls, DEL and C1 controls: newline, tab, escape sequences, ...
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")

# Deep enough for any sane layout; bounded so a hostile nest of directories cannot
# exhaust file descriptors or the interpreter stack. The snapshot reads no deeper, and a
# tree from outside the lane may nest no deeper (``treegate``).
MAX_DEPTH = 64

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
    reserved = _RESERVED.search(segment)
    if reserved is not None:
        return f"{segment!r} contains {reserved[0]!r}, which Windows does not allow in names"
    if segment.endswith((".", " ")):
        return f"{segment!r} ends with a dot or space, which Windows drops"
    if segment.split(".", 1)[0].rstrip(" ").lower() in _WINDOWS_DEVICES:
        return f"{segment!r} is a reserved device name on Windows"
    return None


def path_violations(path: str) -> list[Violation]:
    """Rules a path breaks by its name alone (one violation per rule)."""
    found: dict[str, str] = {}
    if path.startswith("/"):
        found["path-escape"] = "path must be relative and use '/' only"
    segments = path.split("/")
    for index, segment in enumerate(segments):
        for rule, message in name_rules(segment, directory=index < len(segments) - 1).items():
            found.setdefault(rule, message)
    return [Violation(path, rule, found[rule]) for rule in _PATH_RULES if rule in found]


def name_rules(name: str, *, directory: bool) -> dict[str, str]:
    """Rules one name (a directory's or a file's) breaks, rule -> message; empty when the
    name may be stored. The one definition behind ``path_violations`` and what any tree
    from outside the lane is held to (``treegate``)."""
    if _PLAIN.fullmatch(name) and not name.endswith("."):
        # Letters, digits, '-', '_' and inner dots, not leading: no rule but these two
        # can apply (the common case, a note's name, decided without the rest).
        norm = name.lower()
        special = INSTRUCTION_DIRS if directory else INSTRUCTION_FILES
        if norm not in special and norm.split(".", 1)[0] not in _WINDOWS_DEVICES:
            return {}
    found: dict[str, str] = {}
    if not name.isascii():  # ASCII is UTF-8: the common case costs no encoding
        try:
            name.encode("utf-8")
        except UnicodeEncodeError:
            found["bad-name"] = "path is not valid UTF-8"
    if _CONTROL.search(name):
        found["bad-name"] = "path contains control characters"
    if "\\" in name or "/" in name:
        found["path-escape"] = "path must be relative and use '/' only"
    if name in ("", ".", ".."):
        found.setdefault("path-escape", f"path segment {name!r} is not allowed")
        return found
    norm = normalize_segment(name)
    if norm == ".git" or norm.startswith(".git") or norm == "git~1":
        found["git-metadata"] = f"{name!r} is Git metadata"
    elif name.startswith(".") or norm.startswith("."):
        found["hidden-path"] = f"hidden path segment {name!r}"
    if (not directory and norm in INSTRUCTION_FILES) or (directory and norm in INSTRUCTION_DIRS):
        found["instruction-file"] = f"{name!r} is a runtime instruction file"
    unportable = _unportable(name)
    if unportable is not None:
        found["unportable-name"] = unportable
    return found


def entry_name_rules(raw: bytes, *, directory: bool) -> dict[str, str]:
    """``name_rules`` of a tree entry's name as git stores it (bytes), plus what only a tree
    entry can be: empty, or more than one path component (``git fsck``: ``emptyName``,
    ``fullPathname``)."""
    if _PLAIN_BYTES.fullmatch(raw) and not raw.endswith(b"."):
        # ``name_rules``'s common case decided on the bytes: no decoding, no str (a tree
        # of 100,000 records is checked before its first run and walked for its layer).
        special = _INSTRUCTION_DIRS_BYTES if directory else _INSTRUCTION_FILES_BYTES
        norm = raw.lower()
        if norm not in special and norm.split(b".", 1)[0] not in _WINDOWS_DEVICES_BYTES:
            return {}
    return entry_text_rules(raw, directory=directory)


def entry_text_rules(raw: bytes, *, directory: bool) -> dict[str, str]:
    """``entry_name_rules`` decided on the name's text alone, every name the long way."""
    if not raw:
        return {"path-escape": "an empty name"}
    found = name_rules(raw.decode("utf-8", "surrogateescape"), directory=directory)
    if b"/" in raw:
        found["path-escape"] = "a name holding '/' (more than one path component)"
    return found


def is_storable_path(path: str) -> bool:
    """Whether a path may appear in any tree the host writes (candidate, quarantine, main)."""
    return not path_violations(path)
