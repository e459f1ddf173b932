"""Where the lane's validations read from, and how many of one imp's run at once.

A validation reads the directories its change writes into. A repository opened for one
validation read each of them from disk again (inflate and parse: ~0.5 ms for a topic
of 1,000 records, most of validating a one-note change), though runs that finish
together mostly started from the same main. So validations of one base share one
repository, and with it libgit2's cache of the trees already read. Each imp keeps one,
for the newest base asked for; older ones go with their last user. Sharing is safe
because every pygit2 call a validation makes holds the interpreter lock for the whole
libgit2 call (pygit2 releases it only in revision walks and blob filters, which
validation never uses), and validation only reads.

Validation is Python work under the interpreter lock: two at once already keep both
cores of the machine this runs on busy beside the lane's leader, and each thread beyond
that only adds lock hand-offs (a burst of 500 runs spent more time switching threads
than validating). So each imp validates at most ``MAX_VALIDATING`` changes at once; the
others wait on a semaphore, asleep, and a waiting run costs nothing.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager

import pygit2

from impyard.home import Home
from impyard.knowledge.imps import open_repo

#: Validations of one imp at once.
MAX_VALIDATING = 2
#: Imps whose newest validation repository is kept open (the least recent go first).
MAX_KEPT = 8


class _Imp:
    def __init__(self) -> None:
        self.slots = threading.BoundedSemaphore(MAX_VALIDATING)
        self.base: str | None = None
        self.repo: pygit2.Repository | None = None


_lock = threading.Lock()
_imps: OrderedDict[tuple[str, str], _Imp] = OrderedDict()


@contextmanager
def validation_reader(home: Home, imp: str, base: str) -> Iterator[pygit2.Repository]:
    """A repository of ``imp`` to validate a change against ``base`` with, once one of the
    imp's validation slots is free; the slot is held until the block ends."""
    state = _state(home, imp)
    with state.slots:
        with _lock:
            repo = state.repo if state.base == base else None
        if repo is None:
            repo = open_repo(home, imp)
            with _lock:
                state.base, state.repo = base, repo
        yield repo


def _state(home: Home, imp: str) -> _Imp:
    key = (str(home.root), imp)
    with _lock:
        state = _imps.get(key)
        if state is None:
            state = _imps[key] = _Imp()
            while len(_imps) > MAX_KEPT:
                _imps.popitem(last=False)
        else:
            _imps.move_to_end(key)
        return state
