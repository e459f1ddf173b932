"""One imp's refs pushed to one backup location, retried while the failure may pass.

What a backup holds: ``refs/heads/main`` (fast-forward only: a remote main that is
not an ancestor of ours is reported and left alone, never overwritten),
``refs/candidates/*`` and ``refs/quarantine/*`` (forced, since the lane re-points
them, and deleted on the remote once they are gone here), and the imp's settings
(``meta``). Every attempt reads the refs afresh, pushes them by object id (so what
was checked is what is sent) and only what the remote does not already hold.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import pygit2
from tenacity import (
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    stop_when_event_set,
    wait_exponential,
)

from impyard.backup.meta import SETTINGS_REF, settings_commit
from impyard.backup.remotes import Location, ensure_local_repo, scrub
from impyard.backup.transport import Callbacks, configure_transport
from impyard.common.errors import BackupError, ImpyardError
from impyard.home import Home
from impyard.knowledge.imps import open_repo, read_imp_settings
from impyard.knowledge.store.repo import MAIN

#: Ref namespaces a backup mirrors exactly (created, moved and deleted with ours).
MIRRORED = ("refs/candidates/", "refs/quarantine/")
ATTEMPTS = 4
BACKOFF_SECONDS = 0.5
MAX_BACKOFF_SECONDS = 8.0


class MainDiverged(BackupError):
    """The remote's main holds commits ours lacks: nothing to retry, an owner decides."""


@dataclass(frozen=True)
class PushResult:
    """How one imp's push to one remote ended."""

    remote: str  # the location's label (no password)
    main: str | None  # the main the remote holds now, when it is one of ours
    updated: int = 0  # refs created or moved
    deleted: int = 0
    error: str | None = None
    attempts: int = 1
    duration_ms: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None


def backed_up_refs(repo: pygit2.Repository) -> dict[str, pygit2.Oid]:
    """The refs a backup holds, as this repository has them now."""
    found: dict[str, pygit2.Oid] = {}
    for name in repo.references:
        if name != MAIN and not name.startswith(MIRRORED):
            continue
        try:
            target = repo.references[name].resolve().target
        except (KeyError, pygit2.GitError):
            continue  # deleted while we listed
        if isinstance(target, pygit2.Oid):
            found[name] = target
    return found


def remote_refs(repo: pygit2.Repository, url: str) -> dict[str, pygit2.Oid]:
    remote = repo.remotes.create_anonymous(url)
    heads = remote.list_heads(callbacks=Callbacks())
    return {head.name: head.oid for head in heads if head.name and head.name.startswith("refs/")}


@dataclass
class _Plan:
    specs: list[str]
    main: str | None  # what the remote's main will be, when it is ours
    diverged: str | None
    updated: int
    deleted: int


def _plan(
    repo: pygit2.Repository,
    ours: dict[str, pygit2.Oid],
    theirs: dict[str, pygit2.Oid],
    settings: pygit2.Oid,
) -> _Plan:
    specs: list[str] = []
    plan = _Plan(specs, None, None, 0, 0)
    mine, remote_main = ours.get(MAIN), theirs.get(MAIN)
    if mine is not None:
        if remote_main is None or remote_main == mine or _descends(repo, mine, remote_main):
            plan.main = str(mine)
            if remote_main != mine:
                specs.append(f"{mine}:{MAIN}")  # no '+': the transport checks it too
                plan.updated += 1
        elif _descends(repo, remote_main, mine):
            # Another process pushed a main newer than the one read here: ours is in it.
            plan.main = str(remote_main)
        else:
            plan.diverged = (
                f"the remote's main {str(remote_main)[:12]} is not an ancestor of main "
                f"{str(mine)[:12]}; it was left as it is"
            )
    for name, oid in sorted(ours.items()):
        if name != MAIN and theirs.get(name) != oid:
            specs.append(f"+{oid}:{name}")
            plan.updated += 1
    for name in sorted(theirs):
        if name.startswith(MIRRORED) and name not in ours:
            specs.append(f":{name}")
            plan.deleted += 1
    if theirs.get(SETTINGS_REF) != settings:
        specs.append(f"+{settings}:{SETTINGS_REF}")
    return plan


def _descends(repo: pygit2.Repository, commit: pygit2.Oid, ancestor: pygit2.Oid) -> bool:
    """Whether ``commit`` has ``ancestor`` in its history (False when either is unknown)."""
    try:
        return bool(repo.descendant_of(commit, ancestor))
    except (KeyError, ValueError, pygit2.GitError):
        return False


def push_once(home: Home, imp: str, location: Location) -> PushResult:
    """One attempt: list the remote's refs, push what differs, report what it holds now."""
    configure_transport()
    started = time.monotonic()
    repo = open_repo(home, imp)
    ensure_local_repo(location)
    ours = backed_up_refs(repo)
    settings = settings_commit(repo, read_imp_settings(home, imp))
    theirs = remote_refs(repo, location.url)
    plan = _plan(repo, ours, theirs, settings)
    if plan.specs:
        callbacks = Callbacks()
        # A fresh remote: one that listed refs is connected for fetching, not pushing.
        repo.remotes.create_anonymous(location.url).push(plan.specs, callbacks=callbacks)
        if callbacks.refused:
            refused = "; ".join(f"{ref}: {why}" for ref, why in sorted(callbacks.refused.items()))
            raise BackupError(f"the remote refused {refused}")
    if plan.diverged is not None:
        raise MainDiverged(plan.diverged)
    return PushResult(
        remote=location.label,
        main=plan.main,
        updated=plan.updated,
        deleted=plan.deleted,
        duration_ms=round((time.monotonic() - started) * 1000, 1),
    )


def _transient(exc: BaseException) -> bool:
    if isinstance(exc, MainDiverged):
        return False
    # A missing or broken imp repository is no network hiccup; the rest may pass.
    return isinstance(exc, pygit2.GitError | OSError | BackupError)


def push(
    home: Home,
    imp: str,
    location: Location,
    *,
    attempts: int = ATTEMPTS,
    abandon: threading.Event | None = None,
) -> PushResult:
    """``push_once``, retried with backoff on failures that may pass; never raises for a
    push that failed (the result says why). ``abandon`` set: no further attempt."""
    stop_now = abandon or threading.Event()
    retrying = Retrying(
        stop=stop_after_attempt(attempts) | stop_when_event_set(stop_now),
        wait=wait_exponential(multiplier=BACKOFF_SECONDS, max=MAX_BACKOFF_SECONDS),
        retry=retry_if_exception(_transient),
        sleep=lambda seconds: _sleep(stop_now, seconds),
        reraise=True,
    )
    started = time.monotonic()
    tries = 0
    failure: BaseException | None = None
    try:
        for attempt in retrying:
            with attempt:
                tries += 1
                try:
                    result = push_once(home, imp, location)
                except BaseException as exc:
                    failure = exc
                    raise
    except (_Abandoned, ImpyardError, pygit2.GitError, OSError) as exc:
        last = failure if isinstance(exc, _Abandoned) and failure is not None else exc
        return PushResult(
            remote=location.label,
            main=None,
            error=scrub(_one_line(last), location.base),
            attempts=tries,
            duration_ms=round((time.monotonic() - started) * 1000, 1),
        )
    return PushResult(
        remote=result.remote,
        main=result.main,
        updated=result.updated,
        deleted=result.deleted,
        attempts=tries,
        duration_ms=round((time.monotonic() - started) * 1000, 1),
    )


class _Abandoned(Exception):
    """The process is leaving: the failure before this backoff is the push's last."""


def _sleep(abandon: threading.Event, seconds: float) -> None:
    # An abandon (set before or during the backoff) ends the retries, not just the wait.
    if abandon.wait(seconds):
        raise _Abandoned


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:500]
