"""A note on an imp's main whose name, body and commit message carry markup and script
payloads, committed as an owner would with ordinary git (a clone, a commit, a push)."""

from __future__ import annotations

from pathlib import Path

from impyard.home import Home
from tests.helpers.git import git

SCRIPT = "<script>window.__pwned=1</script>"
IMG = "<img src=x onerror=window.__pwned=2>"
NOTE_NAME = f"records/vendors/{IMG}.md"
NOTE_BODY = (
    "---\nid: n_7f3c91a2d0e4_9\ncreated_at: 2026-07-11T12:00:00Z\nsource_urls:\n"
    f"- javascript:alert(1)\n- https://example.com/{SCRIPT}\n---\n{SCRIPT}\n{IMG}\n"
)
MESSAGE = f"owner: {SCRIPT} {IMG}"


def commit_hostile_note(home: Home, imp: str, work: Path) -> str:
    """Commit the note onto the imp's main; its path."""
    commit_files(home, imp, work, {NOTE_NAME: NOTE_BODY}, MESSAGE)
    return NOTE_NAME


def commit_files(home: Home, imp: str, work: Path, files: dict[str, str], message: str) -> None:
    """Commit ``files`` (path: text) onto the imp's main through a clone in ``work``."""
    git("clone", "-q", home.repo(imp), work)
    for path, text in files.items():
        target = work / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    git("-C", work, "add", "-A")
    git("-C", work, "commit", "-q", "-m", message)
    git("-C", work, "push", "-q", "origin", "HEAD:main")
