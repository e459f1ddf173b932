"""Finding runs by what an owner types: a full run id, a unique prefix of one (with or
without ``run-``), or ``last``; and the newest runs first, for listings and completion.

Run ids are ``run-<UTC second>-<10 hex>``, so their names sort by creation time to the
second: a prefix is matched against the names in ``runs/`` alone, never by reading every
manifest (a data root keeps thousands). Manifests are read only to order runs made in the
same second and to keep one imp's runs: ``last`` and listings newest first, only as far
as they need; a prefix scoped to an imp, only the runs it matches.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass

from impyard.common.errors import AmbiguousError, NotFoundError
from impyard.common.names import RUN_ID
from impyard.home import Home
from impyard.runs.records import manifest as manifests
from impyard.runs.records.model import Manifest

LAST = "last"
RUN_PREFIX = "run-"
#: ``run-YYYYMMDDTHHMMSSZ``: the part of a run id that says when it was made.
STAMP_CHARS = 20
#: Matches an ambiguity error names before it counts the rest.
SHOWN_MATCHES = 5
#: Text that could be part of a run id. Anything else (``/``, ``.``, control characters)
#: names no run, so it never reaches a path.
_PREFIX = re.compile(r"[A-Za-z0-9-]{1,31}")


def run_ids(home: Home) -> list[str]:
    """Every run directory's id, newest first (names only; no manifest is read)."""
    try:
        with os.scandir(home.runs_dir) as entries:
            names = [entry.name for entry in entries if RUN_ID.fullmatch(entry.name)]
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(names, reverse=True)


def resolve_run(home: Home, text: str, imp: str | None = None) -> str:
    """The full run id ``text`` names: the id itself (which wins over a prefix), a unique
    prefix of one, or ``last`` (the newest run); only ``imp``'s runs when given.

    Raises ``NotFoundError`` when nothing matches and ``AmbiguousError`` when a prefix
    matches several runs."""
    if text == LAST:
        return newest_run(home, imp)
    shown = _shown(text)
    if not _PREFIX.fullmatch(text):
        raise NotFoundError(f"no run matches {shown}")
    if RUN_ID.fullmatch(text) and home.run_dir(text).is_dir():
        if imp is not None and not _of_imp(home, text, imp):
            raise NotFoundError(f"run {text} is not a run of imp {imp!r}")
        return text
    matches = prefix_matches(text, run_ids(home))
    if imp is not None:
        matches = [run_id for run_id in matches if _of_imp(home, run_id, imp)]
    scope = "" if imp is None else f" of imp {imp!r}"
    if not matches:
        raise NotFoundError(f"no run{scope} matches {shown}")
    if len(matches) > 1:
        raise ambiguous(f"run prefix {shown}{scope}", matches)
    return matches[0]


def prefix_matches(text: str, ids: list[str]) -> list[str]:
    """The ids ``text`` begins, in the order given; ``run-`` may be left off ``text``."""
    prefixes = (text,) if text.startswith(RUN_PREFIX) else (text, RUN_PREFIX + text)
    return [run_id for run_id in ids if run_id.startswith(prefixes)]


def ambiguous(what: str, matches: list[str]) -> AmbiguousError:
    """One line naming the first ``SHOWN_MATCHES`` matches and counting the rest."""
    listed = ", ".join(matches[:SHOWN_MATCHES])
    rest = len(matches) - SHOWN_MATCHES
    more = f" (and {rest} more)" if rest > 0 else ""
    return AmbiguousError(f"{what} is ambiguous: {listed}{more}", matches)


def newest_run(home: Home, imp: str | None = None) -> str:
    """The newest run (of ``imp``, when given), as ``recent`` orders them."""
    for group in _same_second(run_ids(home)):
        found = _read(home, group, imp)
        if found:
            return max(found, key=_created).run_id
        if imp is None:
            return group[0]  # no manifest written yet: the id alone orders it
    if imp is None:
        raise NotFoundError(f"no runs yet in {home.runs_dir}")
    raise NotFoundError(f"imp {imp!r} has no runs")


@dataclass(frozen=True)
class Recent:
    """The newest runs with a readable manifest, and what a listing leaves out."""

    manifests: list[Manifest]
    #: How many run directories are not listed (counted without an imp), else None.
    older: int | None
    #: Whether older runs are left out (also when ``older`` cannot be counted cheaply).
    more: bool


def recent(home: Home, limit: int | None, imp: str | None = None) -> Recent:
    """The ``limit`` newest runs (all with None), newest first, of ``imp`` when given. Ids
    order runs to the second; runs made in the same second go by the time their manifests
    record."""
    ids = run_ids(home)
    shown: list[Manifest] = []
    for group in _same_second(ids):
        found = sorted(_read(home, group, imp), key=_created, reverse=True)
        if limit is not None and len(shown) + len(found) > limit:
            shown.extend(found[: limit - len(shown)])
            # Without an imp every other name counts; with one, counting would read them all.
            return Recent(shown, len(ids) - len(shown) if imp is None else None, True)
        shown.extend(found)
    return Recent(shown, 0 if imp is None else None, False)


def _same_second(ids: list[str]) -> Iterator[list[str]]:
    """Newest-first ids in runs of one creation second."""
    group: list[str] = []
    for run_id in ids:
        if group and group[0][:STAMP_CHARS] != run_id[:STAMP_CHARS]:
            yield group
            group = []
        group.append(run_id)
    if group:
        yield group


def _read(home: Home, ids: list[str], imp: str | None) -> list[Manifest]:
    found = (manifests.read_or_none(home, run_id) for run_id in ids)
    return [m for m in found if m is not None and (imp is None or m.imp == imp)]


def _created(manifest: Manifest) -> tuple[str, str]:
    return (manifest.created_at or manifest.started_at or "", manifest.run_id)


def _of_imp(home: Home, run_id: str, imp: str) -> bool:
    found = manifests.read_or_none(home, run_id)
    return found is not None and found.imp == imp


def _shown(text: str) -> str:
    """``text`` quoted for an error line: escaped (repr) and bounded."""
    return repr(text if len(text) <= 40 else text[:40] + "…")
