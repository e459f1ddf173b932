"""The append-only activity journal (``journal.jsonl``): pointers, never note bodies."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from impyard.fsutil import append_line_durably, read_jsonl
from impyard.names import utc_now


class Journal:
    def __init__(self, path: Path) -> None:
        self.path = path

    def record(self, event: str, **fields: Any) -> dict[str, Any]:
        entry = {"ts": utc_now(), "event": event, **fields}
        append_line_durably(self.path, json.dumps(entry, sort_keys=True))
        return entry

    def read(
        self, *, imp: str | None = None, run: str | None = None, event: str | None = None
    ) -> list[dict[str, Any]]:
        entries, _bad = read_jsonl(self.path)
        return [
            entry
            for entry in entries
            if (imp is None or entry.get("imp") == imp)
            and (run is None or entry.get("run") == run)
            and (event is None or entry.get("event") == event)
        ]
