"""The append-only activity journal (``journal.jsonl``): pointers, never note bodies.

Past ``retention.journal_max_bytes`` gc rotates it (``impyard.retention.rotation``):
the live file is renamed to ``journal.<n>.jsonl`` (n counting up from 1, so a higher
number is newer and no rotated file is ever renamed again), then compressed to
``journal.<n>.jsonl.gz``. Reading goes through every rotated file, oldest first, then
the live one; ``impyard.journal.tail`` reads the newest events first and follows the
journal as it is written.
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path
from typing import Any

from impyard.common.fsutil import append_line, parse_jsonl, read_jsonl
from impyard.common.names import utc_now

_SUFFIX = ".jsonl"
_GZ = ".gz"


def rotated_path(live: Path, number: int, *, compressed: bool = True) -> Path:
    """Where rotation ``number`` of the journal at ``live`` goes (``journal.<n>.jsonl.gz``)."""
    name = f"{live.name.removesuffix(_SUFFIX)}.{number}{_SUFFIX}"
    return live.with_name(name + (_GZ if compressed else ""))


def rotated_numbers(live: Path) -> dict[int, Path]:
    """Every rotation of ``live`` by number, oldest first. A rotation cut short by a crash
    may be there both compressed and not; the compressed file is complete (it is renamed
    into place only once written), so it wins."""
    stem = re.escape(live.name.removesuffix(_SUFFIX))
    pattern = re.compile(rf"{stem}\.([1-9][0-9]*)\.jsonl(\.gz)?")
    found: dict[int, Path] = {}
    try:
        names = sorted(p.name for p in live.parent.iterdir())
    except FileNotFoundError:
        return found
    for name in names:
        match = pattern.fullmatch(name)
        if match is None:
            continue
        number = int(match[1])
        if match[2] or number not in found:
            found[number] = live.with_name(name)
    return dict(sorted(found.items()))


def read_rotated(path: Path) -> list[dict[str, Any]]:
    """The entries of one rotated file, compressed or plain."""
    if path.name.endswith(_GZ):
        with gzip.open(path, "rb") as handle:
            raw = handle.read()
    else:
        raw = path.read_bytes()
    return parse_jsonl(raw)[0]


def read_all(live: Path) -> list[dict[str, Any]]:
    """Every entry of the journal at ``live``, rotated files first, in the order written."""
    while True:
        before = rotated_numbers(live)
        try:
            entries = [e for path in before.values() for e in read_rotated(path)]
        except FileNotFoundError:
            continue  # a rotation finished meanwhile (its plain file is gone): read again
        entries.extend(read_jsonl(live)[0])
        # A rotation between listing and reading the live file would hide its lines.
        if rotated_numbers(live).keys() == before.keys():
            return entries


class Journal:
    def __init__(self, path: Path) -> None:
        self.path = path

    def record(self, event: str, **fields: Any) -> dict[str, Any]:
        return self._write(event, fields, sync=True)

    def record_unsynced(self, event: str, **fields: Any) -> dict[str, Any]:
        """``record`` without the fsync (``fsutil.append_line``), for an event worth less
        than one: a metric's sample, which a power cut may lose."""
        return self._write(event, fields, sync=False)

    def _write(self, event: str, fields: dict[str, Any], *, sync: bool) -> dict[str, Any]:
        entry = {"ts": utc_now(), "event": event, **fields}
        append_line(self.path, json.dumps(entry, sort_keys=True), sync=sync)
        return entry

    def read(
        self, *, imp: str | None = None, run: str | None = None, event: str | None = None
    ) -> list[dict[str, Any]]:
        entries = read_all(self.path)
        return [
            entry
            for entry in entries
            if (imp is None or entry.get("imp") == imp)
            and (run is None or entry.get("run") == run)
            and (event is None or entry.get("event") == event)
        ]
