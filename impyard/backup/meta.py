"""The imp's settings (``imp.json``: image, command, agent) travel with its backup.

They live outside Git, beside the repository, so the backup carries them as
``refs/impyard/settings``: a commit whose tree holds one ``imp.json``. The commit is
made from the settings alone (fixed author and date, no parent), so the same
settings are the same commit and an unchanged imp pushes nothing new. Its objects
are written to the canonical repository unreferenced (only the push names them);
its refs stay exactly main, candidates and quarantine.
"""

from __future__ import annotations

import json
from typing import Any, cast

import pygit2

from impyard.knowledge.imps import ImpSettings
from impyard.knowledge.store.repo import FILE_MODE, HOST_EMAIL, HOST_NAME

SETTINGS_REF = "refs/impyard/settings"
SETTINGS_FILE = "imp.json"
# An imp.json is a few hundred bytes; a remote's is read only up to this.
MAX_SETTINGS_BYTES = 64 * 1024


def settings_commit(repo: pygit2.Repository, settings: ImpSettings) -> pygit2.Oid:
    """The commit holding ``settings``. libgit2 only touches an object it already has, so
    asking again for the same settings costs a few stats, not writes."""
    data = (json.dumps(settings.as_dict(), indent=2, sort_keys=True) + "\n").encode()
    builder = repo.TreeBuilder()
    builder.insert(SETTINGS_FILE, repo.create_blob(data), FILE_MODE)
    tree = builder.write()
    signature = pygit2.Signature(HOST_NAME, HOST_EMAIL, 0, 0)
    return repo.create_commit(None, signature, signature, "Impyard imp settings\n", tree, [])


def read_settings(repo: pygit2.Repository) -> ImpSettings | None:
    """The settings ``repo``'s settings ref holds; None when it holds nothing readable."""
    try:
        tree = repo.references[SETTINGS_REF].peel(pygit2.Commit).tree
        blob = tree[SETTINGS_FILE].id
        if repo.odb.read_header(blob)[1] > MAX_SETTINGS_BYTES:
            return None
        raw: Any = json.loads(cast(pygit2.Blob, repo[blob]).data)
    except (KeyError, ValueError, TypeError, AttributeError, pygit2.GitError):
        return None
    if not isinstance(raw, dict):
        return None
    values = {key: raw.get(key) for key in ("image", "command", "agent")}
    return ImpSettings(**{k: v if isinstance(v, str) else None for k, v in values.items()})
