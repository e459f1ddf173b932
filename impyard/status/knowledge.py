"""Per imp: where main is, and what waits for an owner off main (quarantines, candidates).

A ref under ``refs/quarantine/`` or ``refs/candidates/`` stays until retention drops it
or an owner deals with it, so its count is the work pending for that imp.
"""

from __future__ import annotations

from impyard.common.errors import ImpyardError
from impyard.home import Home
from impyard.knowledge.imps import open_repo
from impyard.knowledge.store.repo import MAIN
from impyard.status.model import ImpKnowledge

QUARANTINE_PREFIX = "refs/quarantine/"
CANDIDATE_PREFIX = "refs/candidates/"


def imp_knowledge(home: Home, imp: str) -> ImpKnowledge:
    import pygit2

    try:
        repo = open_repo(home, imp)
        names = list(repo.references)
        ref = repo.references.get(MAIN)
        main = str(ref.resolve().target) if ref is not None else None
    except (ImpyardError, pygit2.GitError) as exc:
        return ImpKnowledge(imp=imp, main=None, quarantines=0, candidates=0, error=str(exc))
    return ImpKnowledge(
        imp=imp,
        main=main,
        quarantines=sum(name.startswith(QUARANTINE_PREFIX) for name in names),
        candidates=sum(name.startswith(CANDIDATE_PREFIX) for name in names),
    )
