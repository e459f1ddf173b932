"""What an imp's last lane pass knew, kept in memory for its next pass.

A burst of runs lands in several passes, each starting from the main the last one left.
Two things the last pass built are still true there and costly to build again:

- per base of its changes, what had landed since that base (``rechecks.LandedSince``):
  a pass's first change of a base read every commit since it, and the third pass of a
  burst read hundreds, beyond what the history cache holds (a commit read and a tree
  diff each: seconds). Only the bases of the last pass are kept; a pass uses one only
  if it ends where main starts.
- the directories its chain edited, parsed (``headtree.Directory``): a burst's second
  and third passes re-read and re-parsed every topic of a 100,000-record imp (100
  trees of 1,000 entries, a fifth of a pass). A pass uses one only where main still
  holds its tree id, so one that main moved past outside the lane is read again.

Both are bounded: the bases for the last ``CARRIED_IMPS`` imps that landed, the
directories by their entries over all imps (``CARRIED_ENTRIES``, ~100 bytes each).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping

from impyard.knowledge.store.headtree import Directory
from impyard.knowledge.validation.rechecks import LandedSince

CARRIED_IMPS = 16
CARRIED_ENTRIES = 400_000

_since: OrderedDict[str, dict[str, LandedSince]] = OrderedDict()
_trees: OrderedDict[str, Mapping[str, Directory]] = OrderedDict()
_lock = threading.Lock()


def take_carried(repo_path: str) -> tuple[dict[str, LandedSince], Mapping[str, Directory]]:
    """What the last pass of the repository at ``repo_path`` left (empty when nothing),
    no longer kept here: the pass taking it holds the lane, and carries its own on."""
    with _lock:
        return _since.pop(repo_path, {}), _trees.pop(repo_path, {})


def carry(repo_path: str, since: dict[str, LandedSince], parsed: Mapping[str, Directory]) -> None:
    """Keep what a pass of the repository at ``repo_path`` knew at its end."""
    entries = sum(len(directory.entries) for directory in parsed.values())
    with _lock:
        _since[repo_path] = since
        while len(_since) > CARRIED_IMPS:
            _since.popitem(last=False)
        if entries > CARRIED_ENTRIES:
            return
        _trees[repo_path] = parsed
        total = sum(len(d.entries) for kept in _trees.values() for d in kept.values())
        while total > CARRIED_ENTRIES:
            _, dropped = _trees.popitem(last=False)
            total -= sum(len(directory.entries) for directory in dropped.values())
