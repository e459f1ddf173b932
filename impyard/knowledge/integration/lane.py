"""The integration lane: one per imp, serialized across threads and processes.

A validated change is replayed onto the latest ``main`` — never textually
merged: the change is a set of written and deleted paths, and only the trees
on those paths are rebuilt — then re-checked against what landed since the
run's base (path collisions, duplicate ids, name clashes, repository size:
``rechecks``), committed with trusted trailers and published by compare-and-swap
of ``main``.

A run may checkpoint more than once (mid-run, then at exit): each lane commit
carries the run and the checkpoint's number in its trailers, only the part of
the change that is new since the run's last checkpoint is integrated
(``increments``), and the run's own earlier commits are not collisions.

A lane commit ends with its ``Impyard-*`` trailers, then one ``Source-Receipt``
trailer per fetch receipt the records it adds cite (``citations``).

Changes of one imp that wait for the lane together land together
(``lanequeue``): each is validated by its own caller outside the lock, then the
thread that gets the lane replays all of them in order, each as its own commit
on top of the previous one, with its own trailers. A change that no longer fits
(collision, duplicate id, size) is kept as a candidate as always and the rest
go on. The chain's new objects are held in memory (``staging``) and written as
one durable batch (one pack, rewritten trees as deltas), then main moves once by
compare-and-swap, and the origin and the size cache are refreshed once: a pass
pays the fsyncs of one landing, and each change only its replay. Each pass leaves a
``lane.pass`` journal event once it is over (``lanepass``).

Crash safety: the chain's objects are durable before main moves, and main moves
once, so a chain either landed whole or not at all. A host that dies after
moving ``main`` but before recording the outcome re-integrates the checkpoint
on restart; ``find_landed_commit`` sees the run's ``Impyard-Run`` and
``Impyard-Checkpoint`` trailers on main and returns that commit instead of
landing it twice.

What a lane commit says and what an integration answers (trailers, results,
candidate refs, how an integration ends) are in ``lanerecord``; this module
re-exports them. The validation before a change's turn is ``lanecheck``'s.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import cast

import pygit2

from impyard.common.errors import KnowledgeError
from impyard.common.fsutil import locked
from impyard.home import Home
from impyard.knowledge.change import Change, KnowledgeLimits, Mode, Violation
from impyard.knowledge.imps import open_repo
from impyard.knowledge.integration.lanecarry import carry, take_carried
from impyard.knowledge.integration.lanecheck import Prepared, prepare
from impyard.knowledge.integration.lanepass import take_recorded_turn
from impyard.knowledge.integration.lanequeue import Ticket
from impyard.knowledge.integration.lanerecord import (
    LaneCheckpoint,
    LaneResult,
    Outcome,
    Trailers,
    candidate_ref,
    commits_since,
    find_landed_commit,
    keep_candidate,
    run_commits,
)
from impyard.knowledge.integration.origin import sync_origin
from impyard.knowledge.store.fold import fold_objects
from impyard.knowledge.store.headtree import Directory, HeadTree
from impyard.knowledge.store.history import Added, checkpoint_number, lane_commit, remember_added
from impyard.knowledge.store.packfile import PackCopyError
from impyard.knowledge.store.repo import MAIN, host_signature, imp_signature, main_commit
from impyard.knowledge.store.staging import MemoryObjects, staged
from impyard.knowledge.store.trees import PathConflict
from impyard.knowledge.validation.citations import Receipts
from impyard.knowledge.validation.clashes import carry_name_forms
from impyard.knowledge.validation.increments import Landed
from impyard.knowledge.validation.rechecks import LandedSince
from impyard.knowledge.validation.sizes import blob_size, record_tree_bytes, tree_bytes
from impyard.knowledge.validation.validate import REPO_PATH

__all__ = [
    "LaneCheckpoint",
    "LaneResult",
    "Trailers",
    "candidate_ref",
    "checkpoint_number",
    "commits_since",
    "find_landed_commit",
    "integrate",
    "keep_candidate",
    "run_commits",
]

#: A chain is published once it holds this many commits or staged bytes; the rest of
#: the pass goes on in a new chain. Bounds the memory a pass holds (at 100,000 records a
#: one-note commit stages ~80 KB of trees) and how long its first caller waits.
MAX_CHAIN_COMMITS = 1024
MAX_STAGED_BYTES = 64 << 20
#: Loose objects one canonical fold takes (each is read and compressed again, ~0.3 ms for
#: a 100,000-record imp's ~40 KB topic tree, and unlinked, ~0.14 ms on this kind of
#: machine's ext4), so a pass never stalls on a backlog (100,000 loose records took 19 s
#: in one fold); the rest goes in the next passes.
CANONICAL_FOLD_OBJECTS = 256
_TREE = pygit2.enums.ObjectType.TREE
log = logging.getLogger(__name__)


def integrate(
    home: Home,
    imp: str,
    change: Change,
    *,
    base: str,
    namespace: str,
    mode: Mode,
    limits: KnowledgeLimits,
    trailers: Trailers,
    landed: Landed | None = None,
    keep_refused: bool = True,
    receipts: Receipts | None = None,
    dry_run: bool = False,
    refusal: Violation | None = None,
    screened: Sequence[Violation] = (),
) -> LaneResult:
    """Validate, then land ``change`` on main (or keep it as a candidate); never lands twice.
    ``refusal``: the change may not land at all, for this reason (kept as refused).
    ``screened``: violations the caller found in the change's files (a tainted run's
    participant scan), refused with validation's own.

    ``change`` is the run's whole change against ``base``; ``landed`` is what the run's
    earlier checkpoints landed (``increments.landed_by``). ``keep_refused`` False (a mid-run
    checkpoint: the box is alive and can fix its files) keeps no candidate ref for what
    main does not take; the violations are the answer. ``receipts`` are the run's fetch
    receipts by id (default: none, so a note citing one is refused).

    Validation runs here, in the caller's thread (``readers``: at most two of an imp's at
    once, sharing a repository per base); then the change waits its turn in the imp's
    lane, where it may land in one pass with others that waited alongside it.

    ``dry_run`` (a repair's preview) writes nothing: the same validation, then the same
    replay onto main's head in memory, never published; no candidate is kept, and a change
    that would land answers ``integrated`` without a commit. Main may move before a real
    landing, which then checks again.
    """
    prepared = prepare(
        home,
        imp,
        change,
        base=base,
        namespace=namespace,
        mode=mode,
        limits=limits,
        trailers=trailers,
        landed=landed,
        keep_refused=keep_refused and not dry_run,
        receipts=receipts,
        refusal=refusal,
        screened=screened,
    )
    if isinstance(prepared, LaneResult):
        return prepared
    if dry_run:
        return _dry_replay(home, imp, prepared)
    lane_lock, land = home.lane_lock(imp), partial(_land, home, imp)
    return take_recorded_turn(
        home.journal, imp, lane_lock, prepared, partial(locked, lane_lock), land
    )


def _dry_replay(home: Home, imp: str, prepared: Prepared) -> LaneResult:
    """How the lane would end ``prepared`` on main's head now, its commit never kept."""
    repo = open_repo(home, imp)
    outcome = Outcome(home, prepared.parts, prepared.trailers, keep_refused=False)
    with staged(repo.path) as (stage, memory):
        replayed = _Chain(home, repo, stage, memory, {})._replay(prepared, outcome)
    return replayed if isinstance(replayed, LaneResult) else outcome.landed("integrated")


_Ticket = Ticket[Prepared, LaneResult]


def _land(home: Home, imp: str, batch: list[_Ticket]) -> None:
    """The leader's pass, under the lane lock: replay ``batch`` in order as chains of
    commits, each chain published once. A change that fails on its own fails alone; a
    chain that fails to publish ends the pass (its changes, and those not reached, get
    the error: main did not move for them, or moved and re-integrating finds it)."""
    repo = open_repo(home, imp)
    since, parsed = take_carried(repo.path)
    with staged(repo.path) as (stage, memory):
        chain = _Chain(home, repo, stage, memory, since, parsed)
        for ticket in batch:
            try:
                chain.add(ticket)
            except Exception as exc:
                ticket.fail(exc)
            if chain.full:
                chain = chain.publish(home.origin(imp))
        chain = chain.publish(home.origin(imp))
    bases = {ticket.item.trailers.base for ticket in batch}
    carry(
        repo.path,
        {base: known for base, known in since.items() if base in bases},
        chain.trees.parsed,
    )


class _Chain:
    """Commits replayed one on another from main, held in memory until ``publish``."""

    def __init__(
        self,
        home: Home,
        repo: pygit2.Repository,
        stage: pygit2.Repository,
        memory: MemoryObjects,
        since: dict[str, LandedSince],
        parsed: Mapping[str, Directory] | None = None,
    ) -> None:
        self.home, self.repo, self.stage, self.memory = home, repo, stage, memory
        #: Per base of the pass's changes: what landed since it (shared by its chains).
        self.since = since
        self.start = main_commit(repo)
        self.head = self.start
        self._tree: pygit2.Tree | None = cast(pygit2.Commit, stage[self.start]).tree
        #: The head's tree as the chain edits it (``headtree``).
        self.trees = HeadTree(self._tree.id.raw, self._read_tree, parsed)
        self._total: int | None = None
        #: Changes the chain commits, with their outcome and commit, in order.
        self.landed: list[tuple[_Ticket, Outcome, str]] = []
        #: Changes the chain does not commit, with their result.
        self.settled: list[tuple[_Ticket, LaneResult]] = []
        #: What each of the chain's commits added, for the origin refresh.
        self.added: dict[str, Added] = {}
        #: Each directory the chain changed: its tree at the start (None: it is new), and
        #: the names that came (True) or went (False) since.
        self.directories: dict[str, tuple[bytes | None, dict[str, bool]]] = {}

    @property
    def full(self) -> bool:
        return len(self.landed) >= MAX_CHAIN_COMMITS or self.memory.bytes >= MAX_STAGED_BYTES

    def total(self) -> int:
        if self._total is None:
            self._total = tree_bytes(self.repo, self.start)
        return self._total

    def add(self, ticket: _Ticket) -> None:
        prepared = ticket.item
        outcome = Outcome(self.home, prepared.parts, prepared.trailers, prepared.keep_refused)
        mark = self.memory.mark()
        try:
            replayed = self._replay(prepared, outcome)
        except BaseException:
            self.memory.rollback(mark)
            raise
        if isinstance(replayed, LaneResult):
            self.memory.rollback(mark)  # trees built for a change main does not take
            self.settled.append((ticket, replayed))
        else:
            self.landed.append((ticket, outcome, replayed))

    def _replay(self, prepared: Prepared, outcome: Outcome) -> LaneResult | str:
        """One change onto the chain's head: its new commit, or how it ends without one."""
        trailers, increment = prepared.trailers, prepared.parts.increment
        since = self._landed_since(trailers.base)
        found = since.landed(trailers.run, trailers.checkpoint)
        if found is not None:
            return outcome.landed("integrated", found)
        conflicts = since.clashes(
            self._head_tree, increment, prepared.namespace, prepared.mode, trailers.run
        )
        if conflicts:
            return outcome.refused("conflict", conflicts)
        try:
            edit = self.trees.edit(self.stage, increment.written, increment.deleted)
        except PathConflict as exc:
            clash = Violation(exc.path, "collision", "main now has a file/directory clash here")
            return outcome.refused("conflict", [clash])
        if edit.root == self.trees.root:
            return outcome.landed("empty")
        replaced = sum(blob_size(self.stage, pygit2.Oid(raw=raw)) for raw in edit.replaced)
        written = sum(state.size for state in increment.written.values())
        total = self.total() + written - replaced
        limit = prepared.limits.max_repo_bytes
        if total > limit:
            too_large = Violation(
                REPO_PATH,
                "repo-too-large",
                f"main would hold {total} bytes; max_repo_bytes is {limit}",
            )
            return outcome.refused("rejected", [too_large])
        for raw, body in edit.objects:
            self.memory.hold(raw, _TREE, body)
        commit = self.stage.create_commit(
            None,
            imp_signature(trailers.imp),
            host_signature(),
            prepared.message + "\n",
            pygit2.Oid(raw=edit.root),
            [pygit2.Oid(hex=self.head)],
        )
        self.trees.accept(edit)
        self._tree = None
        parent, self.head, self._total = self.head, str(commit), total
        # Later changes of the pass recheck against this commit, and the origin refresh
        # publishes it: spare them diffing its trees.
        added = self.added[self.head] = edit.added()
        remember_added(self.head, added)
        for directory, tree_id, replaced_tree in added.trees:
            if replaced_tree is not None:
                self.memory.based_on(tree_id, replaced_tree)
            self.directories.setdefault(directory, (replaced_tree, {}))
        for directory, name, there in edit.names:
            came = self.directories.setdefault(directory, (None, {}))[1]
            if came.get(name) == (not there):
                del came[name]  # back as it was at the chain's start
            else:
                came[name] = there
        made = lane_commit(self.stage, self.head)
        for since in self.since.values():
            if since.head == parent:
                since.add(self.stage, made)
        return self.head

    def _head_tree(self) -> pygit2.Tree:
        """The head's tree as a pygit2 object, read only when a recheck needs it."""
        if self._tree is None:
            self._tree = cast(pygit2.Tree, self.stage[pygit2.Oid(raw=self.trees.root)])
        return self._tree

    def _read_tree(self, oid: bytes) -> bytes:
        held = self.memory.held(oid)
        if held is not None:
            return held
        data: bytes = self.repo.odb.read(pygit2.Oid(raw=oid))[1]
        return data

    def _landed_since(self, base: str) -> LandedSince:
        """What landed after ``base`` up to the chain's head: read once per base (or
        carried from the last pass), then extended by each commit the pass makes."""
        since = self.since.get(base)
        if since is None or since.head != self.head:
            since = self.since[base] = LandedSince.read(self.stage, base, self.head)
        return since

    def publish(self, origin: Path) -> _Chain:
        """Write the chain's objects durably, move main once, refresh the size cache and
        the origin once; then settle each change. Returns the next chain, from the new main."""
        if self.landed:
            self.memory.write(self.repo)  # durable before main names it
            _compare_and_swap_main(self.repo, self.start, pygit2.Oid(hex=self.head))
            record_tree_bytes(self.repo, self.head, self.total())
            sync_origin(self.repo, origin, self.added)
        for ticket, result in self.settled:
            ticket.settle(result)
        for ticket, outcome, commit in self.landed:
            try:
                ticket.settle(outcome.landed("integrated", commit))
            except Exception as exc:  # keeping its refused files failed; its commit landed
                ticket.fail(exc)
        if self.landed:
            fold_canonical(self.repo)
        # The next runs are validated against this main: index its directories' names
        # from the ones before, rather than each of them listing every name again.
        for directory, (first, came) in self.directories.items():
            last = self.trees.directory_id(directory)
            if first is not None and last is not None:
                carry_name_forms(first, last, came)
        return _Chain(self.home, self.repo, self.stage, self.memory, self.since, self.trees.parsed)


def fold_canonical(repo: pygit2.Repository) -> None:
    """Fold the canonical repository's loose objects and small packs now and then (after
    the pass's runs are told how they landed). Housekeeping: a fold that fails is logged,
    and the next pass tries again."""
    try:
        fold_objects(repo, keep_dirs=True, loose_budget=CANONICAL_FOLD_OBJECTS)
    except (OSError, pygit2.GitError, PackCopyError, RuntimeError) as exc:
        log.warning("could not fold the canonical repository's objects: %s", exc)


def _compare_and_swap_main(repo: pygit2.Repository, old: str, new: pygit2.Oid) -> None:
    """Move main from ``old`` to ``new`` only if it still points at ``old``."""
    ref = repo.lookup_reference(MAIN)
    if str(ref.target) != old:
        raise KnowledgeError(f"main moved outside the lane (expected {old}, found {ref.target})")
    try:
        ref.set_target(new, f"impyard lane: {old[:12]} -> {str(new)[:12]}")
    except pygit2.GitError as exc:  # libgit2 refuses when the stored value is not ``old``
        raise KnowledgeError(f"main moved outside the lane while integrating: {exc}") from exc
