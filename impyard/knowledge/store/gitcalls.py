"""pygit2 calls that take a path or a reference name, minus the reference pygit2 leaks.

pygit2 (1.15, the oldest Impyard accepts, through 1.21 at least) turns such an argument
into a C string with ``PyOS_FSPath`` and never releases the reference that returns,
so every string passed to ``tree[path]``, ``name in tree``, ``TreeBuilder.get`` or
``remove``, or ``Repository.lookup_reference`` (behind ``repo.references``) is never
freed. Under ``serve`` that was some twenty strings a run, each pinning the allocator
pool it sat in: the process grew for as long as it ran.

Each call here hands pygit2 a private copy of the string, and afterwards drops the one
reference the call kept on that copy, counted, not assumed. Only when this pygit2 is
seen to leak (``LEAKS``, probed once on an in-memory repository): a pygit2 that no
longer does is called plainly. A call may come here only if its C code keeps no
reference to the argument of its own (true of the ones below; read in pygit2's source).
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Callable
from typing import Generic, TypeVar

import pygit2
from pygit2.branches import Branches
from pygit2.references import References
from pygit2.remotes import RemoteCollection
from pygit2.submodules import SubmoduleCollection

T = TypeVar("T")
C = TypeVar("C")

_decref = ctypes.pythonapi.Py_DecRef
_decref.argtypes = (ctypes.py_object,)
_decref.restype = None


def _private(text: str) -> str:
    """A new string equal to ``text`` (two or more characters) that nobody else holds."""
    return "".join((text[:1], text[1:]))


def _leaks() -> bool:
    builder = pygit2.Repository().TreeBuilder()  # in memory: nothing on disk
    probe = _private("impyard-probe")
    before = sys.getrefcount(probe)
    builder.get(probe)
    leaked = sys.getrefcount(probe) - before
    if leaked == 1:
        _decref(probe)
    return leaked == 1


#: Whether this pygit2 keeps a reference to each path or name it is given.
LEAKS = _leaks()


def _call(fn: Callable[[str], T], text: str) -> T | None:
    """``fn(text)``, or None when it raises KeyError, leaving no reference behind."""
    # Strings of one character or none are shared singletons: an extra reference to one
    # costs nothing, and other threads move its count.
    if not LEAKS or type(text) is not str or len(text) < 2:
        try:
            return fn(text)
        except KeyError:
            return None
    private = _private(text)
    before = sys.getrefcount(private)
    try:
        result: T | None = fn(private)
    except KeyError:  # it holds ``private`` in its args, until this handler ends
        result = None
    # Counted in this frame with nothing of ours pending: beyond ``before`` is only what
    # the call kept. Anything but the one leaked reference is left alone.
    kept = sys.getrefcount(private) - before
    if kept == 1:
        _decref(private)
    return result


def tree_entry(tree: pygit2.Tree, path: str) -> pygit2.Object | None:
    """``tree[path]`` (a name or a slash path), or None."""
    return _call(tree.__getitem__, path)


def tree_has(tree: pygit2.Tree, name: str) -> bool:
    """``name in tree``."""
    return bool(_call(tree.__contains__, name))


def builder_get(builder: pygit2.TreeBuilder, name: str) -> pygit2.Object | None:
    return _call(builder.get, name)


def builder_remove(builder: pygit2.TreeBuilder, name: str) -> None:
    """Remove ``name``, which must be in ``builder`` (else pygit2's GitError)."""
    _call(builder.remove, name)


class _MadeWhenRead(Generic[C]):
    """A collection pygit2 stores on each repository at open (``repo.branches``, ...):
    discarded when pygit2 sets it, made afresh, holding the repository, when read."""

    def __init__(self, make: Callable[[pygit2.Repository], C]) -> None:
        self._make = make

    def __get__(self, repo: pygit2.Repository, owner: type | None = None) -> C:
        return self._make(repo)

    def __set__(self, repo: pygit2.Repository, value: object) -> None:
        pass


class Repository(pygit2.Repository):
    """A ``pygit2.Repository`` whose reference lookups (``repo.references.get``,
    ``repo.references[name]``, ``name in repo.references``) leave no reference behind,
    and that is freed when its last reference goes.

    pygit2 stores four collections on every repository it opens, each pointing back at
    it, so every repository was in a reference cycle that only the cyclic collector
    frees: until a collection of its generation, it kept its libgit2 state (config,
    object caches, open packs and their descriptors). Under serve some 90 repositories
    at a time were waiting, and the ones that had reached an older generation waited
    much longer. Here a collection is made when it is read (it holds the repository;
    the repository does not hold it)."""

    branches = _MadeWhenRead(Branches)
    references = _MadeWhenRead(References)
    remotes = _MadeWhenRead(RemoteCollection)
    submodules = _MadeWhenRead(SubmoduleCollection)

    def lookup_reference(self, name: str) -> pygit2.Reference:
        found = _call(super().lookup_reference, name)
        if found is None:
            raise KeyError(name)
        return found
