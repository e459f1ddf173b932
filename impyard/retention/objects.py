"""What a gc folds of the imps' canonical repositories: a backlog of loose objects.

The lane folds a canonical repository a few hundred loose objects a pass, so that no
pass stalls on it; an imp whose objects were written before folds (100,000 loose records
took 19 s to fold at once) is then folded over hundreds of passes. A gc folds such a
backlog off the lane's path: in parts of ``GC_FOLD_OBJECTS``, each under the imp's lane
lock (the lane writes and folds the same repository), so a lane pass waits for one part
at most. Loose objects are counted as the lane counts them, from one directory of 256.
"""

from __future__ import annotations

import pygit2

from impyard.common.fsutil import locked
from impyard.home import Home
from impyard.knowledge.imps import list_imps, open_repo
from impyard.knowledge.store.fold import SAMPLE_DIR, SAMPLED_LOOSE, fold_objects, sampled_loose
from impyard.knowledge.store.packfile import PackCopyError
from impyard.retention.model import GcItem, GcOutcome

#: Loose objects one part of a gc's fold takes (each is read, compressed again and
#: unlinked: ~0.4 s a part on this kind of machine's ext4).
GC_FOLD_OBJECTS = 2048


def plan_loose_objects(home: Home, notes: list[str]) -> list[GcItem]:
    """An item per imp whose canonical repository holds the lane's trigger of loose objects
    (``SAMPLED_LOOSE`` in ``objects/SAMPLE_DIR``, about 4,000 in all) or more."""
    items = []
    for imp in list_imps(home):
        objects = home.repo(imp) / "objects"
        try:
            sampled = sampled_loose(objects)
        except OSError as exc:
            notes.append(f"imp {imp!r}: loose objects were not counted: {exc}")
            continue
        if sampled < SAMPLED_LOOSE:
            continue
        items.append(
            GcItem(
                kind="loose_objects",
                id=imp,
                path=str(objects),
                reason=f"about {sampled * 256} loose objects (objects/{SAMPLE_DIR} holds "
                f"{sampled}, the lane's trigger is {SAMPLED_LOOSE}; it folds a few hundred "
                "a pass)",
                imp=imp,
            )
        )
    return items


def fold_loose_objects(home: Home, item: GcItem) -> GcOutcome:
    """Fold ``item``'s repository until its loose objects are under the lane's trigger."""
    imp = str(item.imp)
    folded = 0
    try:
        repo = open_repo(home, imp)
        while True:
            with locked(home.lane_lock(imp)):
                done = fold_objects(repo, keep_dirs=True, loose_budget=GC_FOLD_OBJECTS)
            if done is None or done.loose_files == 0:
                break
            folded += done.loose_files
    except (OSError, pygit2.GitError, PackCopyError, RuntimeError) as exc:
        already = f" after folding {folded} loose objects" if folded else ""
        return GcOutcome(item, "failed", f"{exc}{already}")
    if not folded:
        return GcOutcome(item, "skipped", "the lane folded them meanwhile")
    return GcOutcome(item, "folded", f"{folded} loose objects into packs")
