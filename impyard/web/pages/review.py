"""The review queue: candidates and quarantines of every imp, newest first, read with the
functions ``impyard candidates|quarantine list|show|diff`` use, and the repair actions
they have, each recorded as done by ``web``.

Previews: retry, approve, drop and rework show their dry run (the same functions, writing
nothing): whether the retry would land, the files it would write and delete on main or
every violation it would be refused for; what drop would remove; the task rework would
queue, with the task file its run would read (the owner's note included). Export's
names where it writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import pygit2

from impyard.common.errors import ImpyardError
from impyard.common.names import utc_now
from impyard.home import Home
from impyard.knowledge.imps import list_imps, open_repo
from impyard.repair import records
from impyard.repair.approve import approve
from impyard.repair.drop import drop
from impyard.repair.export import export
from impyard.repair.preserved import Kind, find_preserved, list_preserved
from impyard.repair.retry import RETRY_ADVICE, retry
from impyard.repair.rework import rework
from impyard.repair.views import details, diff, row
from impyard.settings import Settings

Action = Literal["retry", "approve", "drop", "rework", "export"]
ACTIONS: tuple[Action, ...] = ("retry", "approve", "drop", "rework", "export")
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


def actions_for(shown: Item) -> list[Action]:
    """The item's buttons: approve only for a change held for its deletions."""
    return [a for a in ACTIONS if a != "approve" or shown.shown.get("held")]


def preview(
    home: Home,
    settings: Settings,
    kind: Kind,
    run_id: str,
    action: Action,
    note: str | None = None,
) -> dict[str, Any]:
    """What the action will do: its dry run (or why the action would be refused), in
    words, beside the item it acts on."""
    shown = item(home, kind, run_id)
    d = shown.shown
    dry: dict[str, Any] | None = None
    refused: str | None = None
    if action != "export":
        try:
            dry = _repair(home, settings, kind, run_id, action, note, dry_run=True)
        except ImpyardError as exc:
            refused = exc.message
    lines: list[str]
    if action == "retry":
        lines = [
            f"Re-validates the {d['written']} written and {d['deleted']} deleted file(s) of "
            f"{d['ref']} against main and today's policy, then lands them through the lane "
            "if they pass; if they do not, nothing changes. Below: its dry run now.",
            RETRY_ADVICE.format(noun=f"{kind}s" if kind == "candidate" else kind, run=run_id) + ".",
        ]
    elif action == "approve":
        lines = [
            f"Lands {d['ref']}, held for its {d['deleted']} deletion(s) (more than "
            "knowledge.max_deletions), with its written file(s), through the lane and its "
            "checks with the deletion gate lifted for this change alone; recorded and "
            "journaled as your decision. Below: its dry run now, every file it lands and "
            "every file it deletes."
        ]
    elif action == "drop":
        lines = [f"Deletes {d['ref']} ({d['commit'][:12]}); main is untouched."]
        if d.get("checkout_kept"):
            lines.append("Also removes the run's kept checkout.")
        lines.append("The change is lost unless exported first.")
    elif action == "rework":
        lines = [
            f"Queues a task for imp {d['imp']} to fix the refused files: its box starts with "
            "them, and its task file (below) quotes every violation and your note. "
            f"{d['ref']} stays until you drop it."
        ]
    else:
        lines = [
            f"Writes the {d['written']} file(s) and {d['deleted']} deletion(s) of {d['ref']} "
            f"as plain files, with export.json, under {home.exports_dir}/{run_id}/."
        ]
    stays = action in ("retry", "approve") and dry is not None and not dry.get("would_land")
    return {
        "action": action,
        "lines": lines,
        "item": shown,
        "dry": dry,
        "refused": refused,
        "note": note or "",
        # The action would change nothing: its button is off (a POST still asks again).
        "blocked": refused is not None or stays,
        # Today's reasons, listed by the dry run, stand for the recorded ones.
        "reasons_above": stays and bool(dry and dry["violations"]),
    }


def _repair(
    home: Home,
    settings: Settings,
    kind: Kind,
    run_id: str,
    action: Action,
    note: str | None,
    *,
    dry_run: bool,
) -> dict[str, Any]:
    """Retry, approve, drop or rework, or their dry run: one call, so the preview and the action
    can never be two different computations."""
    if action == "retry":
        return retry(settings, kind, run_id, dry_run=dry_run).as_dict()
    if action == "approve":
        return approve(settings, kind, run_id, dry_run=dry_run).as_dict()
    if action == "drop":
        return drop(home, kind, run_id, dry_run=dry_run).as_dict()
    if dry_run:  # rework's two forms return two types
        return rework(home, kind, run_id, note, dry_run=True).as_dict()
    return rework(home, kind, run_id, note).as_dict()


def act(
    home: Home,
    settings: Settings,
    kind: Kind,
    run_id: str,
    action: Action,
    note: str | None = None,
) -> dict[str, Any]:
    """Do it, as ``web``; the result as the CLI's ``--json`` has it."""
    with records.acting_as(ACTOR):
        if action != "export":
            return _repair(home, settings, kind, run_id, action, note, dry_run=False)
        stamp = utc_now().replace(":", "").replace(".", "")
        return export(home, kind, run_id, home.exports_dir / run_id / stamp).as_dict()
