"""How ``candidates|quarantine retry|drop|rework`` print their result, a real action's
and a dry run's (``--dry-run``: every line says what *would* happen)."""

from __future__ import annotations

from typing import Any

from impyard.cli.shared._common import echo
from impyard.common.textsafe import escape_text, visible


def print_retry(result: dict[str, Any]) -> None:
    if result["dry_run"]:
        _print_retry_dry_run(result)
    elif result["landed"]:
        commit = f" {result['commit']}" if result["commit"] else ""
        echo(
            f"{result['run_id']} {result['outcome']}{commit} (checkpoint {result['checkpoint']}, "
            f"from the {result['source']})"
        )
        if result["candidate_ref"]:
            echo(f"kept back at {result['candidate_ref']}:")
    else:
        count = len(result["violations"])
        echo(
            f"{result['run_id']} {result['outcome']}: {count} violation(s); "
            f"{result['ref']} is kept as it was"
        )
    _violations(result["violations"])
    if result["advice"]:
        echo(result["advice"])


def print_approved(earlier: dict[str, Any]) -> None:
    """A second approval: what the first one did, and that nothing changed now."""
    landed = f" as {earlier['commit']}" if earlier["commit"] else ""
    echo(
        f"{earlier['run_id']} was approved by {visible(earlier['by'])} at {earlier['at']} "
        f"and landed{landed}; nothing changed"
    )


def _print_retry_dry_run(result: dict[str, Any]) -> None:
    where = f"checkpoint {result['checkpoint']}, from the {result['source']}"
    if result["would_land"]:
        written, deleted = result["written"], result["deleted"]
        if result["commit"]:
            what = f"would find it landed already as {result['commit']}"
        elif written or deleted:
            what = f"would land {len(written)} written and {len(deleted)} deleted file(s) on main"
        else:
            what = "would land nothing new (main holds it all)"
        echo(f"dry run: {result['run_id']} {what} ({where}); nothing was changed")
        for path in written:
            echo(visible(f"  write   {path}"))
        for path in deleted:
            echo(visible(f"  delete  {path}"))
        if result["candidate_ref"]:
            echo(f"would keep back at {result['candidate_ref']}:")
    else:
        echo(
            f"dry run: {result['run_id']} would be {result['outcome']} ({where}): "
            f"{len(result['violations'])} violation(s); {result['ref']} would stay as it is"
        )


def print_drop(result: dict[str, Any]) -> None:
    commit = f" ({result['commit']})" if result["commit"] else ""
    if not result["dry_run"]:
        line = f"dropped {result['ref']}{commit}"
        if result["checkout_removed"]:
            line += "; the kept checkout is removed"
        echo(line)
        return
    line = f"dry run: would drop {result['ref']}{commit}"
    if result["checkout_removed"]:
        line += " and remove the kept checkout"
    echo(line + "; main is untouched, nothing was removed")
    for path in result["space_paths"]:
        echo(visible(f"  remove  {path}"))


def print_rework(result: dict[str, Any]) -> None:
    """A rework's dry run: the task it would queue, and the task file its run would read."""
    echo(
        f"dry run: would queue a rework of {result['rework_of']} for imp {result['imp']} "
        f"(mode {result['mode']}, attempt {result['rework_attempt']}), starting from "
        f"{len(result['files'])} file(s) of {result['ref']}; nothing was queued"
    )
    echo("its task file (record names get the new run's namespace when it starts):")
    for line in escape_text(result["task_text"]).splitlines():
        echo(f"  {line}" if line else "")


def _violations(found: list[dict[str, Any]]) -> None:
    for v in found:
        echo(visible(f"  {v['path'] or '-'}: {v['rule']}: {v['message']}"))
