"""The review queue: candidates and quarantines of every imp, newest first, read with the
functions ``impyard candidates|quarantine list|show|diff`` use, and the repair actions
they have, each recorded as done by ``web``.

Previews: retry has no dry run, so its preview is what it will re-validate (the
reasons the change was refused and its diff against main now); drop's preview names
what it removes; export's names where it writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import pygit2

from impyard.errors import ImpyardError
from impyard.home import Home
from impyard.knowledge.imps import list_imps, open_repo
from impyard.names import utc_now
from impyard.repair import records
from impyard.repair.drop import drop
from impyard.repair.export import export
from impyard.repair.preserved import Kind, find_preserved, list_preserved
from impyard.repair.retry import RETRY_ADVICE, retry
from impyard.repair.views import details, diff, row
from impyard.settings import Settings

Action = Literal["retry", "drop", "export"]
ACTIONS: tuple[Action, ...] = ("retry", "drop", "export")
KINDS: tuple[Kind, ...] = ("candidate", "quarantine")
#: Who the journal and the run's manifest name for a repair made in the console.
ACTOR = "web"


@dataclass(frozen=True)
class Queue:
    rows: list[dict[str, Any]]
    #: Imps whose repository could not be read, with why.
    errors: list[str]


def queue(home: Home) -> Queue:
    rows: list[dict[str, Any]] = []
    errors: list[str] = []
    for imp in list_imps(home):
        try:
            repo = open_repo(home, imp)
            for kind in KINDS:
                rows.extend(row(found, repo) for found in list_preserved(home, kind, imp))
        except (ImpyardError, pygit2.GitError) as exc:
            errors.append(f"{imp}: {exc}")
    rows.sort(key=lambda r: (r["run_id"], r["kind"]), reverse=True)
    return Queue(rows, errors)


@dataclass(frozen=True)
class Item:
    shown: dict[str, Any]
    diff: dict[str, Any]


def item(home: Home, kind: Kind, run_id: str) -> Item:
    found = find_preserved(home, kind, run_id)
    repo = open_repo(home, found.imp)
    return Item(details(found, repo), diff(found, repo))


def preview(home: Home, kind: Kind, run_id: str, action: Action) -> dict[str, Any]:
    """What the action will do, in words, beside the item it acts on."""
    shown = item(home, kind, run_id)
    d = shown.shown
    lines: list[str]
    if action == "retry":
        lines = [
            f"Re-validates the {d['written']} written and {d['deleted']} deleted file(s) of "
            f"{d['ref']} against main ({d['main'][:12]}) and today's policy, then lands them "
            "through the lane if they pass; if they do not, nothing changes.",
            "Retry has no dry run: this preview is the reasons the change was refused and "
            "its diff against main now, below.",
            RETRY_ADVICE + ".",
        ]
    elif action == "drop":
        lines = [f"Deletes {d['ref']} ({d['commit'][:12]}); main is untouched."]
        if d.get("checkout_kept"):
            lines.append("Also removes the run's kept checkout.")
        lines.append("The change is lost unless exported first.")
    else:
        lines = [
            f"Writes the {d['written']} file(s) and {d['deleted']} deletion(s) of {d['ref']} "
            f"as plain files, with export.json, under {home.exports_dir}/{run_id}/."
        ]
    return {"action": action, "lines": lines, "item": shown}


def act(home: Home, settings: Settings, kind: Kind, run_id: str, action: Action) -> dict[str, Any]:
    """Do it, as ``web``; the result as the CLI's ``--json`` has it."""
    with records.acting_as(ACTOR):
        if action == "retry":
            return retry(settings, kind, run_id).as_dict()
        if action == "drop":
            return drop(home, kind, run_id).as_dict()
        stamp = utc_now().replace(":", "").replace(".", "")
        return export(home, kind, run_id, home.exports_dir / run_id / stamp).as_dict()
