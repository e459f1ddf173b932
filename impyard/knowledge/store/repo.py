"""The imp's canonical knowledge repository: opening it, its main ref, and how libgit2
is configured to write it.

Only the trusted host writes here, and only through pygit2 (never the git CLI). The
imp catalogue is ``imps``, tree building ``trees``, repository sizes ``sizes``; each
builds on this module, which imports none of them.
"""

from __future__ import annotations

from pathlib import Path

import pygit2

from impyard.common.errors import KnowledgeError
from impyard.knowledge.store.gitcalls import Repository
from impyard.knowledge.store.refnames import MAIN as MAIN  # one definition, shared with mainref

HOST_NAME = "impyard"
HOST_EMAIL = "impyard@localhost"
FILE_MODE = pygit2.enums.FileMode.BLOB
EXEC_MODE = pygit2.enums.FileMode.BLOB_EXECUTABLE
TREE_MODE = pygit2.enums.FileMode.TREE
# Largest tree object libgit2 keeps parsed in memory (a directory of ~500,000 entries).
TREE_CACHE_LIMIT = 32 << 20


def host_signature() -> pygit2.Signature:
    return pygit2.Signature(HOST_NAME, HOST_EMAIL)


def imp_signature(imp: str) -> pygit2.Signature:
    return pygit2.Signature(imp, f"{imp}@impyard.local")


def main_commit(repo: pygit2.Repository) -> str:
    try:
        return str(repo.lookup_reference(MAIN).target)
    except (KeyError, pygit2.GitError) as exc:
        raise KnowledgeError(f"{repo.path}: branch main is missing") from exc


_configured = False


def configure_libgit2() -> None:
    """The process-wide libgit2 settings every repository Impyard opens or creates relies
    on; called by each of those entry points (``open_repo_at``, ``imps.create_imp``,
    ``origin``), effective from the first call on. A process that wants other settings
    (the test suite turns fsync off for speed) calls this first and then changes them.

    - fsync: libgit2 syncs every object, ref and their directories before returning;
      otherwise a host crash right after the lane moves main could leave main naming a
      commit whose objects never reached the disk (libgit2's default is not to sync).
    - tree cache: libgit2 caches parsed trees only up to 4 KiB (about 60 entries), so
      every path lookup through a bigger directory (a topic of a few hundred records)
      re-read and re-parsed it: ~25 µs instead of ~0.5 µs, paid per written path by
      validation and the lane. The cache stays bounded by libgit2's total (256 MiB).
    """
    global _configured
    if _configured:
        return
    pygit2.settings.enable_fsync_gitdir(True)
    pygit2.settings.cache_object_limit(pygit2.enums.ObjectType.TREE, TREE_CACHE_LIMIT)
    _configured = True


def open_repo_at(path: Path, context: str = "") -> pygit2.Repository:
    """The repository at ``path``, with libgit2 configured as every Impyard writer needs."""
    try:
        configure_libgit2()
        return Repository(str(path))
    except pygit2.GitError as exc:
        raise KnowledgeError(f"{context}cannot open {path}: {exc}") from exc
