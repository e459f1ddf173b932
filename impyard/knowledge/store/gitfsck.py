"""What ``git fsck --strict`` checks of one tree or commit, done on the object's raw bytes.

The host never runs the git CLI, so a tree from outside the lane (a restored backup, an
owner's commit) is parsed here as git stores it, not through libgit2's lenient reader:
libgit2 reads a tree whose entries are out of order, repeated or zero-padded, and a
commit whose author line git refuses. Each finding is a short message naming git's own
check (``treeNotSorted``, ``badTimezone``, ...) so it can be looked up in git's manual.
Names are judged by the lane's rules elsewhere (``pathnames``, through ``treegate``).
"""

from __future__ import annotations

import re
from typing import Literal, NamedTuple

EntryKind = Literal["tree", "file", "executable", "symlink", "gitlink", "bad"]

# The modes git itself writes; anything else (040000, 100664, 0100644, ...) is a mode
# fsck --strict reports (zeroPaddedFilemode, badFilemode).
_KINDS: dict[bytes, EntryKind] = {
    b"40000": "tree",
    b"100644": "file",
    b"100755": "executable",
    b"120000": "symlink",
    b"160000": "gitlink",
}
NULL_OID = bytes(20)
_HEX_LINE = re.compile(rb"[0-9a-f]{40}\n")
# fsck_ident: a name (not starting with '<') ending in a space, <email>, a decimal date
# without zero padding, a +hhmm/-hhmm zone, and nothing after it on the line.
_IDENT = re.compile(rb"[^<>\n]* <[^<>\n]*> (0|[1-9][0-9]{0,18}) [+-][0-9]{4}\n")
# git's timestamps are unsigned 64-bit; a date past that overflows (badDateOverflow).
_MAX_DATE = 2**64 - 1


class TreeEntry(NamedTuple):
    mode: bytes
    name: bytes
    oid: bytes  # 20 raw bytes

    @property
    def kind(self) -> EntryKind:
        return _KINDS.get(self.mode, "bad")


def parse_tree(data: bytes) -> tuple[list[TreeEntry], list[str]]:
    """The entries of a raw tree object, and what fsck --strict would say of it.

    A tree that cannot be parsed to its end gives the entries read so far and a problem.
    """
    matches = list(_TREE_ENTRY.finditer(data))
    entries = [TreeEntry(m[1], m[2], m[3]) for m in matches]
    problems: list[str] = []
    if _WHOLE_TREE.fullmatch(data) is None:  # entries do not tile the object
        end = 0
        for index, match in enumerate(matches):
            if match.start() != end:
                entries = entries[:index]
                break
            end = match.end()
        problems.append(f"badTree: cannot parse the entry at byte {end}")
    problems.extend(_order_problems(entries))
    return entries, problems


# mode, a space, the name up to its NUL, 20 bytes of object id.
_TREE_ENTRY = re.compile(rb"([0-9]{1,7}) ([^\0]*)\0(.{20})", re.DOTALL)
_WHOLE_TREE = re.compile(rb"(?:[0-9]{1,7} [^\0]*\0.{20})*", re.DOTALL)


def _order_problems(entries: list[TreeEntry]) -> list[str]:
    # git's order: byte order of names, a directory's read with a trailing '/'.
    keys = [e.name + b"/" if e.mode == b"40000" else e.name for e in entries]
    found: list[str] = []
    if keys != sorted(keys):
        first = next(i for i in range(1, len(keys)) if keys[i] < keys[i - 1])
        found.append(f"treeNotSorted: {_shown(entries[first].name)} is out of order")
    names = [e.name for e in entries]
    if len(set(names)) != len(names):
        seen: set[bytes] = set()
        for name in names:
            if name in seen:
                found.append(f"duplicateEntry: {_shown(name)} appears twice")
                break
            seen.add(name)
    for entry in entries:
        if entry.mode.startswith(b"0"):
            found.append(f"zeroPaddedFilemode: {_shown(entry.name)} has mode {_shown(entry.mode)}")
        if entry.oid == NULL_OID:
            found.append(f"nullSha1: {_shown(entry.name)} points to the null object id")
    return found


class ParsedCommit(NamedTuple):
    tree: bytes | None  # raw 20 bytes
    parents: list[bytes]
    problems: list[str]


def parse_commit(data: bytes) -> ParsedCommit:
    """A raw commit's tree and parents, and what fsck --strict would say of its header."""
    problems: list[str] = []
    header_end = data.find(b"\n\n")
    header = data if header_end < 0 else data[: header_end + 1]
    if header_end < 0 and not data.endswith(b"\n"):
        problems.append("unterminatedHeader: the header does not end")
    if b"\0" in header:
        problems.append("nulInHeader: the header holds a NUL byte")
    if b"\0" in data[len(header) :]:
        problems.append("nulInCommit: the message holds a NUL byte")
    pos = 0
    tree: bytes | None = None
    if header.startswith(b"tree ") and _HEX_LINE.match(header, 5):
        tree = bytes.fromhex(header[5:45].decode())
        pos = 46
    else:
        problems.append("missingTree or badTreeSha1: no valid tree line first")
    parents: list[bytes] = []
    while header.startswith(b"parent ", pos):
        if not _HEX_LINE.match(header, pos + 7):
            problems.append("badParentSha1: a parent line is not an object id")
            break
        parents.append(bytes.fromhex(header[pos + 7 : pos + 47].decode()))
        pos += 48
    authors = 0
    while header.startswith(b"author ", pos):
        authors += 1
        pos = _ident(header, pos + 7, "author", problems)
    if authors == 0:
        problems.append("missingAuthor: no author line")
    elif authors > 1:
        problems.append("multipleAuthors: more than one author line")
    if header.startswith(b"committer ", pos):
        _ident(header, pos + 10, "committer", problems)
    else:
        problems.append("missingCommitter: no committer line after the author")
    return ParsedCommit(tree, parents, problems)


def _ident(header: bytes, pos: int, role: str, problems: list[str]) -> int:
    """Check the identity at ``pos``; return where the next line starts."""
    line_end = header.find(b"\n", pos)
    after = len(header) if line_end < 0 else line_end + 1
    found = _IDENT.match(header, pos)
    if found is None or found.end() != after or int(found[1]) > _MAX_DATE:
        problems.append(f"badIdent: the {role} line is not 'Name <email> date +zone'")
    return after


def _shown(raw: bytes) -> str:
    """Raw bytes as text safe to show: escapes for anything not printable UTF-8."""
    text = raw.decode("utf-8", "backslashreplace")
    return repr(text)
