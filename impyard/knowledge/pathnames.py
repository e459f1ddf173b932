"""Rules a path breaks by its name alone, in every mode and for every tree the host
writes (main, candidates, quarantine): not UTF-8 or control characters, escaping the
tree, hidden segments, Git metadata in any disguise, agent instruction files, and names
Windows cannot hold.
"""

from __future__ import annotations

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
