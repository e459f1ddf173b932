"""``impyard journal``: the activity journal, filtered, its last events, or followed."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Iterable
from types import FrameType
from typing import Any

import typer

from impyard.cli.shared import complete
from impyard.cli.shared._common import initialized_home
from impyard.cli.shared._wrap import terminal_width, wrap_words
from impyard.common.errors import NotFoundError
from impyard.common.textsafe import visible
from impyard.home import Home

#: How often a follower looks for new lines.
FOLLOW_INTERVAL = 0.2
#: How far an event's folded rest is indented on a terminal.
HANGING = 4


def text_line(entry: dict[str, Any]) -> str:
    """One event on one line. Values can come from a box (a gateway URL): every control
    character is shown escaped, so nothing in them acts on the owner's terminal."""
    rest = {k: v for k, v in entry.items() if k not in ("ts", "event", "imp", "run")}
    detail = " ".join(f"{k}={json.dumps(v)}" for k, v in sorted(rest.items()))
    return visible(
        f"{entry.get('ts', '')} {entry.get('event', '')} "
        f"imp={entry.get('imp', '-')} run={entry.get('run', '-')} {detail}".rstrip()
    )


def json_line(entry: dict[str, Any]) -> str:
    # ASCII only: json.dumps escapes every control character, so a line is safe anywhere.
    return json.dumps(entry, sort_keys=True)


def _stop_on_sigterm() -> None:
    """SIGTERM ends a follower as Ctrl-C does: quietly, exit 0."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


def _write(entries: Iterable[dict[str, Any]], as_json: bool, *, flush: bool) -> None:
    render = json_line if as_json else text_line
    # On a terminal an event longer than its width folds between words, the rest indented;
    # piped, each event stays one line, as grep and a script read it.
    width = terminal_width() if not as_json and sys.stdout.isatty() else None
    for entry in entries:
        line = render(entry)
        if width is not None:
            line = "\n".join(wrap_words(line, width, indent=HANGING))
        sys.stdout.write(line + "\n")
        if flush:
            sys.stdout.flush()  # a pipe reader sees each event as it is written


def _journal_run(home: Home, text: str, imp: str | None) -> str:
    """The run ``text`` names (a unique prefix, ``last``); text that names no run kept in
    ``runs/`` is matched as it is, since the journal keeps events of runs gc removed."""
    from impyard.runs.records.lookup import resolve_run

    try:
        return resolve_run(home, text, imp)
    except NotFoundError:
        return text


def _journal_imp(home: Home, imp: str) -> str:
    """``imp`` when it is an imp, or one the journal still has events of (a removed imp's
    stay); any other name is a typo, refused before anything is printed or followed."""
    from impyard.imp_lookup import checked_imp_name, unknown_imp
    from impyard.journal.query import JournalQuery
    from impyard.journal.tail import JournalTail

    checked_imp_name(home, imp)
    if home.repo(imp).is_dir():
        return imp
    with JournalTail(home.journal) as tail:
        if next(tail.history(JournalQuery(imp=imp), 1), None) is not None:
            return imp
    raise unknown_imp(home, imp, also="and no events of it in the journal")


def register(app: typer.Typer) -> None:
    @app.command("journal")
    def journal_command(
        ctx: typer.Context,
        imp: str | None = typer.Option(
            None, "--imp", help="Only this imp.", autocompletion=complete.imps
        ),
        run: str | None = typer.Option(
            None,
            "--run",
            help="Only this run: its id, a unique prefix, or last.",
            autocompletion=complete.runs,
        ),
        events: list[str] | None = typer.Option(
            None,
            "--event",
            metavar="PATTERN",
            help="Only events whose name matches this glob (gateway.*); repeat for several.",
        ),
        since: str | None = typer.Option(
            None,
            "--since",
            help="Only events at or after this UTC time (2024-05-01T12:00:00Z) or age "
            "(30s, 10m, 2h, 1d).",
        ),
        last: int | None = typer.Option(
            None, "-n", "--lines", min=0, metavar="N", help="Only the last N matching events."
        ),
        follow: bool = typer.Option(
            False, "-f", "--follow", help="Then print new events as they are written."
        ),
        as_json: bool = typer.Option(False, "--json", help="JSON lines: one event per line."),
    ) -> None:
        """Show journal events (pointers to runs and commits, never note bodies); with -f,
        keep printing them as they are written until Ctrl-C."""
        from impyard.journal.query import make_query
        from impyard.journal.tail import JournalTail

        home = initialized_home(ctx)
        if imp is not None:
            imp = _journal_imp(home, imp)
        if run is not None:
            run = _journal_run(home, run, imp)
        query = make_query(imp=imp, run=run, events=events or (), since=since, now=time.time())
        if follow:
            _stop_on_sigterm()
        try:
            with JournalTail(home.journal) as tail:
                _write(tail.history(query, last), as_json, flush=False)
                if follow:
                    sys.stdout.flush()
                    _write(tail.follow(query, interval=FOLLOW_INTERVAL), as_json, flush=True)
        except KeyboardInterrupt:
            return  # Ctrl-C or SIGTERM is how a follower ends
        except BrokenPipeError:
            # The reader went away (`| head`): nothing more to say, and nowhere to say it.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
