"""Rebuild imps from a backup: their canonical repositories, published origins and settings.

Each imp is first fetched whole into a hidden staging directory of the data root
(main, candidate and quarantine refs, and the settings ``meta`` carries), and
only once every named imp has been fetched and checked is anything installed. The
checks, each refusing the whole restore before anything changed:

- every fetched repository passes the gate (``repogate``): main, candidates,
  quarantine, their history and every object, under the lane's rules, as ``git fsck
  --strict`` would; one line per problem;
- the settings each imp would get are what it runs anyway, or the owner said which to
  take (``offers``: ``--accept-settings`` or ``--keep-settings``);
- the data root holds nothing the backup lacks (below).

Then:

- an imp this data root lacks is built beside its final place (``repo.git``, a
  fresh ``origin.git`` of main, ``imp.json`` from the backup or the defaults) and
  renamed in, like ``impyard imp create``, so a crash leaves no half imp;
- an imp it has is brought up to the backup in place, under its lane lock, and
  keeps its own settings unless the owner accepted the backup's; but only when the
  backup holds everything it has: a
  local main that is not an ancestor of (or equal to) the backup's main, or a
  candidate or quarantine ref the backup lacks or holds at another commit, refuses
  the whole restore before anything changed, naming each.
"""

from __future__ import annotations

import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pygit2

from impyard.backup.fetchbound import FetchCallbacks, PackWatch, TooLarge, check_local
from impyard.backup.meta import SETTINGS_REF, read_settings
from impyard.backup.offers import Choice, SettingsOffer, Source, offer
from impyard.backup.push import MIRRORED, backed_up_refs
from impyard.backup.remotes import Location, label, local_imps, locate, scrub
from impyard.backup.transport import configure_transport
from impyard.common.errors import BackupError
from impyard.common.fsutil import atomic_write_json, fsync_dir, locked
from impyard.home import Home
from impyard.journal.log import Journal
from impyard.knowledge.change import KnowledgeLimits
from impyard.knowledge.gates.repogate import check_repository
from impyard.knowledge.gates.treegate import GateLimits, Problems
from impyard.knowledge.imps import ImpSettings, list_imps, read_imp_settings, strip_templates
from impyard.knowledge.integration.origin import sync_origin
from impyard.knowledge.store.gitcalls import Repository
from impyard.knowledge.store.repo import MAIN
from impyard.knowledge.validation.sizes import tree_bytes
from impyard.policy.compile import policy_for_run

FETCHED = [f"+{MAIN}:{MAIN}", *(f"+{ns}*:{ns}*" for ns in MIRRORED)]


@dataclass(frozen=True)
class Restored:
    imp: str
    main: str
    refs: int  # main, candidate and quarantine refs the imp holds now
    created: bool  # a new imp (else an existing one brought up to the backup)
    settings: Source
    # What the imp runs now (None: the policy's image, the image's own command).
    image: str | None
    command: str | None
    agent: str | None


class RestoreRefused(BackupError):
    """The backup may not be restored as it is; nothing was installed. ``document`` says
    why, for ``--json``."""

    def __init__(self, header: str, lines: list[str], document: dict[str, Any]) -> None:
        super().__init__("\n".join([header, *(f"  {line}" for line in lines)]))
        self.document = document


@dataclass
class _Fetched:
    imp: str
    staging: Path  # a hidden directory under knowledge/, removed at the end
    repo: pygit2.Repository
    settings: ImpSettings | None
    offer: SettingsOffer | None = None


def restore(
    home: Home,
    base: str,
    imps: list[str] | None = None,
    *,
    relative_to: Path,
    settings: Choice = "ask",
) -> list[Restored]:
    """Restore ``imps`` (default: every imp a local backup holds) from the backup at
    ``base``; a relative local ``base`` is taken from ``relative_to``. ``settings``: the
    owner's answer to settings that differ from what an imp runs anyway ("ask": refuse)."""
    if not home.knowledge_dir.is_dir():
        raise BackupError(f"no Impyard data root at {home.root}: run `impyard init` first")
    names = list(dict.fromkeys(imps)) if imps else local_imps(base, relative_to)
    if not names:
        raise BackupError(f"no imps at {label(base)}")
    configure_transport()
    fetched: list[_Fetched] = []
    try:
        for imp in names:
            fetched.append(_fetch(home, locate(base, imp, relative_to), imp))
        existing = set(list_imps(home))
        _gate(home, fetched)
        _offer_settings(home, fetched, existing, settings)
        for item in fetched:
            if item.imp in existing:
                _refuse_if_ahead(home, item)
        results = [_install(home, item, item.imp in existing, settings) for item in fetched]
    finally:
        for item in fetched:
            shutil.rmtree(item.staging, ignore_errors=True)
    journal = Journal(home.journal)
    for result in results:
        journal.record(
            "backup.restored",
            imp=result.imp,
            remote=label(base),
            commit=result.main,
            refs=result.refs,
            created=result.created,
            settings=result.settings,
        )
    return results


def _fetch(home: Home, location: Location, imp: str) -> _Fetched:
    staging = home.knowledge_dir / f".restoring-{imp}-{uuid.uuid4().hex[:8]}"
    try:
        staging.mkdir()
        repo_path = staging / "repo.git"
        repo = pygit2.init_repository(str(repo_path), bare=True, initial_head="main")
        strip_templates(repo_path)
        if location.path is not None and not (location.path / "HEAD").is_file():
            raise BackupError(f"imp {imp!r}: no backup at {location.path}")
        # libgit2 packs, indexes and resolves each object whole, in memory: none may get
        # there before its declared size is found within the bound.
        bound = _limits(home, imp).max_object_bytes
        watch = PackWatch(repo_path / "objects" / "pack", bound)
        remote = repo.remotes.create_anonymous(location.url)
        try:
            if location.path is not None:
                check_local(location.path, bound)
            remote.fetch(
                [*FETCHED, f"+{SETTINGS_REF}:{SETTINGS_REF}"], callbacks=FetchCallbacks(watch)
            )
        except TooLarge as exc:
            header = "refusing to restore: the backup holds objects larger than any the lane keeps"
            raise _refused(header, {imp: exc.problems}) from exc
        except pygit2.GitError as exc:
            where = scrub(location.url, location.base)
            raise BackupError(
                f"imp {imp!r}: cannot fetch {where}: {scrub(str(exc), location.base)}"
            ) from exc
        finally:
            watch.close()
        settings = read_settings(repo)
        if SETTINGS_REF in repo.references:
            repo.references.delete(SETTINGS_REF)  # the canonical repo holds no such ref
        (repo_path / "FETCH_HEAD").unlink(missing_ok=True)
        if MAIN not in repo.references:
            raise BackupError(f"imp {imp!r}: the backup at {location.label} has no main")
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return _Fetched(imp, staging, repo, settings)


def _gate(home: Home, fetched: list[_Fetched]) -> None:
    """Refuse, one line a problem, any fetched repository the lane's rules refuse."""
    found = {
        item.imp: check_repository(item.repo, backed_up_refs(item.repo), _limits(home, item.imp))
        for item in fetched
    }
    if any(found.values()):
        raise _refused("refusing to restore: the backup holds what the lane never writes", found)


def _limits(home: Home, imp: str) -> GateLimits:
    return GateLimits.of(KnowledgeLimits.of(policy_for_run(home, imp, strict=False)[0].knowledge))


def _refused(header: str, found: dict[str, Problems]) -> RestoreRefused:
    """The whole restore refused, one line a problem (``--json``: one object each)."""
    lines: list[str] = []
    document: list[dict[str, str]] = []
    for imp, problems in found.items():
        lines.extend(f"{imp} {line}" for line in problems.lines())
        document.extend({"imp": imp, **problem.as_dict()} for problem in problems.found)
        if problems.omitted:
            document.append({"imp": imp, "omitted": str(problems.omitted)})
    return RestoreRefused(
        f"{header} ({len(document)} problem(s)); nothing was installed",
        lines,
        {"ok": False, "problems": document},
    )


def _offer_settings(
    home: Home, fetched: list[_Fetched], existing: set[str], choice: Choice
) -> None:
    """Each imp's settings offer; refused, naming each difference, when the owner must
    choose and has not."""
    for item in fetched:
        local = read_imp_settings(home, item.imp) if item.imp in existing else None
        image = policy_for_run(home, item.imp, strict=False)[0].box.image
        item.offer = offer(item.imp, item.settings, local, image)
    asked = [item.offer for item in fetched if item.offer is not None and item.offer.differs]
    if asked and choice == "ask":
        raise RestoreRefused(
            "refusing to install settings from the backup that differ from what the imps run "
            "anyway: pass --accept-settings to install them, or --keep-settings to keep "
            "this data root's (the defaults for a new imp); nothing was installed",
            [f"{o.imp}: {'; '.join(o.differs)}" for o in asked],
            {"ok": False, "settings": [o.as_dict() for o in asked]},
        )


def lacking(local: pygit2.Repository, backup: pygit2.Repository) -> list[str]:
    """What ``local`` holds that restoring ``backup`` over it would lose, one phrase each."""
    ours, theirs = backed_up_refs(local), backed_up_refs(backup)
    found: list[str] = []
    mine, their_main = ours.get(MAIN), theirs.get(MAIN)
    if mine is not None and mine != their_main and not _has_ancestor(backup, their_main, mine):
        found.append(
            f"main {str(mine)[:12]} is not an ancestor of the backup's main "
            f"{str(their_main)[:12] if their_main else '(none)'}"
        )
    for name, oid in sorted(ours.items()):
        if name == MAIN or theirs.get(name) == oid:
            continue
        where = "is not in the backup" if name not in theirs else "is at another commit there"
        found.append(f"{name} ({str(oid)[:12]}) {where}")
    return found


def _has_ancestor(repo: pygit2.Repository, head: pygit2.Oid | None, ancestor: pygit2.Oid) -> bool:
    if head is None:
        return False
    try:
        return bool(repo.descendant_of(head, ancestor))
    except (KeyError, ValueError, pygit2.GitError):
        return False  # the backup does not even hold the commit


def _refuse_if_ahead(home: Home, item: _Fetched) -> None:
    from impyard.knowledge.imps import open_repo

    missing = lacking(open_repo(home, item.imp), item.repo)
    if missing:
        raise BackupError(
            f"refusing to restore imp {item.imp!r} over {home.repo(item.imp)}: it has what the "
            f"backup lacks: {'; '.join(missing)}"
        )


def _install(home: Home, item: _Fetched, exists: bool, choice: Choice) -> Restored:
    assert item.offer is not None, "offered before anything is installed"
    settings, source = item.offer.decide(choice)
    if exists:
        return _update(home, item, settings, source)
    return _create(home, item, settings, source)


def _create(home: Home, item: _Fetched, settings: ImpSettings, source: Source) -> Restored:
    repo = item.repo
    tree_bytes(repo, str(repo.references[MAIN].target))  # the lane's size cache, primed
    sync_origin(repo, item.staging / "origin.git")
    atomic_write_json(item.staging / Home.IMP_SETTINGS, settings.as_dict())
    fsync_dir(item.staging)
    final = home.imp_dir(item.imp)
    try:
        os.rename(item.staging, final)
    except OSError as exc:  # created meanwhile: restore again to bring it up to the backup
        raise BackupError(f"imp {item.imp!r} appeared at {final} while restoring") from exc
    fsync_dir(home.knowledge_dir)
    installed = Repository(str(home.repo(item.imp)))
    return Restored(
        imp=item.imp,
        main=str(installed.references[MAIN].target),
        refs=len(backed_up_refs(installed)),
        created=True,
        settings=source,
        **settings.as_dict(),
    )


def _update(home: Home, item: _Fetched, settings: ImpSettings, source: Source) -> Restored:
    from impyard.knowledge.imps import open_repo

    repo = open_repo(home, item.imp)
    with locked(home.lane_lock(item.imp)):
        _refuse_if_ahead(home, item)  # again: a run may have landed since the first look
        remote = repo.remotes.create_anonymous(str(item.staging / "repo.git"))
        remote.fetch(FETCHED)
        (Path(repo.path) / "FETCH_HEAD").unlink(missing_ok=True)
        main = sync_origin(repo, home.origin(item.imp))
        if source == "backup":
            atomic_write_json(home.imp_settings(item.imp), settings.as_dict())
    return Restored(
        imp=item.imp,
        main=main,
        refs=len(backed_up_refs(repo)),
        created=False,
        settings=source,
        **settings.as_dict(),
    )
