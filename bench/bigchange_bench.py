"""Big-change benchmark: the checkpoint of a run that adds many ~1 KB records, beside git.

    python -m bench.bigchange_bench [--records 1,5000,30000] [--topics 100] [--base 10000]
                                    [--repeat 3]

For each size: an imp whose main already holds ``--base`` records (in the same
topic directories the run writes to, origin published, size cache warm, as
the lane leaves them) and a directory on disk holding only the run's new
records (what an overlay upper dir holds). Then, side by side in one process,
with libgit2's fsync on as in the product:

- impyard: ``snapshot`` (read, hash, store blobs) + ``integrate`` (validate,
  lane: trees, commit, compare-and-swap of main, origin publish), split per
  phase;
- git: ``git add -A && git commit -q`` of the same directory into a fresh
  scratch repo with git's defaults (2.39: neither objects nor refs fsynced)
  except that no background ``gc --auto`` may start;
- git, durable: the same with ``-c core.fsync=all -c core.fsyncMethod=batch``
  (every object and ref on disk, one flush for all loose objects).

Prints medians in ms and the ratios impyard/git. Every repetition starts from
a fresh imp and a fresh scratch repo (the record files themselves are reused,
so both sides read them from the page cache). Data lives under
$IMPYARD_BENCH_DIR (default /var/tmp; the machine's /tmp is slow after many
deletions).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pygit2

from bench.common import median, print_table, remove_data_root, scratch_dir
from bench.lane_bench import note_bytes
from impyard.dataroot import init_home
from impyard.home import Home
from impyard.knowledge.change import FileState, KnowledgeLimits
from impyard.knowledge.checkouts.checkout import Checkout
from impyard.knowledge.checkouts.snapshot import snapshot
from impyard.knowledge.imps import create_imp, open_repo
from impyard.knowledge.integration import lane, lanecheck
from impyard.knowledge.integration.origin import publish_origin
from impyard.knowledge.store.packs import ObjectBatch
from impyard.knowledge.store.repo import MAIN, main_commit
from impyard.knowledge.store.trees import build_tree
from impyard.knowledge.validation.sizes import tree_bytes

IMP = "bench"
NAMESPACE = "n_00000000beef"
BASE_NAMESPACE = "n_000000000000"
BLOB = pygit2.enums.ObjectType.BLOB
LIMITS = KnowledgeLimits()
GIT_ENV = {
    **os.environ,
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_AUTHOR_NAME": "bench",
    "GIT_AUTHOR_EMAIL": "bench@localhost",
    "GIT_COMMITTER_NAME": "bench",
    "GIT_COMMITTER_EMAIL": "bench@localhost",
}
# No background `git gc --auto` (a 30,000-file commit would start one that runs on,
# detached, through the next measurements).
PLAIN_GIT = ["-c", "gc.auto=0", "-c", "maintenance.auto=false"]
DURABLE_GIT = [*PLAIN_GIT, "-c", "core.fsync=all", "-c", "core.fsyncMethod=batch"]


def write_change(upper: Path, records: int, topics: int) -> None:
    for n in range(1, records + 1):
        topic = upper / "records" / f"topic-{n % topics}"
        topic.mkdir(parents=True, exist_ok=True)
        (topic / f"note-{n}--{NAMESPACE}_{n}.md").write_bytes(note_bytes(NAMESPACE, n))


def make_imp(root: Path, base_records: int, topics: int) -> Home:
    """A fresh imp with ``base_records`` on main and published (fixture: not measured, and
    written without libgit2's per-object fsync, then synced once)."""
    home = Home(root / "home")
    init_home(home)
    pygit2.settings.enable_fsync_gitdir(False)
    try:
        create_imp(home, IMP)
        if base_records:
            _add_base(home, base_records, topics)
    finally:
        pygit2.settings.enable_fsync_gitdir(True)
    os.sync()  # so the measured checkpoint does not pay for the fixture's writeback
    return home


def _add_base(home: Home, base_records: int, topics: int) -> None:
    repo = open_repo(home, IMP)
    head = repo[main_commit(repo)].peel(pygit2.Commit)
    written = {}
    # One pack: loose fixture objects would make every repetition pay for
    # creating, syncing and deleting thousands of files.
    with ObjectBatch(repo, threshold=1) as batch:
        for n in range(1, base_records + 1):
            data = note_bytes(BASE_NAMESPACE, n)
            oid = pygit2.Oid(raw=batch.add(BLOB, data))
            path = f"records/topic-{n % topics}/note-{n}--{BASE_NAMESPACE}_{n}.md"
            written[path] = FileState(str(oid), len(data), False)
        batch.write()
    tree = build_tree(repo, head.tree, written, ())
    signature = pygit2.Signature("bench", "bench@localhost")
    commit = repo.create_commit(
        MAIN, signature, signature, f"{base_records} records\n", tree, [head.id]
    )
    publish_origin(home, IMP)
    tree_bytes(repo, str(commit))  # warm, as the lane leaves it


class Phases:
    """Wall time spent inside the lane's validate and origin publish (patched in place)."""

    def __init__(self) -> None:
        self.ms: dict[str, float] = {}

    def wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.ms[name] = self.ms.get(name, 0.0) + (time.perf_counter() - start) * 1000

        return timed


@contextmanager
def timing_lane(phases: Phases) -> Iterator[None]:
    # The two phases timed apart, wrapped where the lane looks them up: validation (the
    # lane's checks call it from lanecheck) and the origin refresh.
    targets = ((lanecheck, "check_change"), (lane, "sync_origin"))
    originals = [(module, name, getattr(module, name)) for module, name in targets]
    for module, name, fn in originals:
        setattr(module, name, phases.wrap(name, fn))
    try:
        yield
    finally:
        for module, name, fn in originals:
            setattr(module, name, fn)


def impyard_checkpoint(
    root: Path, upper: Path, base_records: int, topics: int, run: int
) -> dict[str, float]:
    # The product's setting: repo.py turns it on at import; say so here all the same.
    pygit2.settings.enable_fsync_gitdir(True)
    home = make_imp(root, base_records, topics)
    repo = open_repo(home, IMP)
    base = main_commit(repo)
    phases = Phases()
    trailers = lane.Trailers(IMP, f"run-20260711T120000Z-{run:010x}", None, None, base, "append")
    start = time.perf_counter()
    change = snapshot(repo, Checkout(kind="overlay", base=base, root=upper), LIMITS)
    snapshot_ms = (time.perf_counter() - start) * 1000
    with timing_lane(phases):
        result = lane.integrate(
            home,
            IMP,
            change,
            base=base,
            namespace=NAMESPACE,
            mode="append",
            limits=LIMITS,
            trailers=trailers,
        )
    total_ms = (time.perf_counter() - start) * 1000
    assert result.checkpoint == "integrated", result.violations[:3]
    remove_data_root(home.root)
    validate_ms, origin_ms = phases.ms["check_change"], phases.ms["sync_origin"]
    return {
        "total": total_ms,
        "snapshot": snapshot_ms,
        "validate": validate_ms,
        "lane": total_ms - snapshot_ms - validate_ms - origin_ms,
        "origin": origin_ms,
    }


def git_commit(root: Path, upper: Path, config: list[str]) -> float:
    git_dir = root / "git"
    subprocess.run(["git", "init", "-q", "--bare", git_dir], check=True, env=GIT_ENV)
    env = {**GIT_ENV, "GIT_DIR": str(git_dir), "GIT_WORK_TREE": str(upper)}
    start = time.perf_counter()
    subprocess.run(
        ["sh", "-c", f"git {' '.join(config)} add -A && git {' '.join(config)} commit -q -m run"],
        check=True,
        env=env,
        cwd=upper,
    )
    elapsed = (time.perf_counter() - start) * 1000
    shutil.rmtree(git_dir)
    return elapsed


def bench_size(records: int, topics: int, base_records: int, repeat: int) -> list[object]:
    root = scratch_dir("impyard-bigchange-")
    try:
        upper = root / "upper"
        write_change(upper, records, topics)
        os.sync()
        ours: list[dict[str, float]] = []
        plain: list[float] = []
        durable: list[float] = []
        for run in range(repeat):
            ours.append(impyard_checkpoint(root, upper, base_records, topics, run))
            plain.append(git_commit(root, upper, PLAIN_GIT))
            durable.append(git_commit(root, upper, DURABLE_GIT))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    phase = {key: median([r[key] for r in ours]) for key in ours[0]}
    git_ms, durable_ms = median(plain), median(durable)
    return [
        records,
        f"{phase['total']:.1f}",
        f"{phase['snapshot']:.1f}",
        f"{phase['validate']:.1f}",
        f"{phase['lane']:.1f}",
        f"{phase['origin']:.1f}",
        f"{git_ms:.1f}",
        f"{durable_ms:.1f}",
        f"{phase['total'] / git_ms:.2f}x",
        f"{phase['total'] / durable_ms:.2f}x",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", default="1,5000,30000")
    parser.add_argument("--topics", type=int, default=100)
    parser.add_argument("--base", type=int, default=10_000, help="records already on main")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    rows = []
    for size in (int(s) for s in args.records.split(",")):
        # Small changes are quick and noisy: take five times the samples of them.
        repeat = args.repeat if size >= 1000 else 5 * args.repeat
        rows.append(bench_size(size, args.topics, args.base, repeat))
    print_table(
        f"checkpoint of one run adding N ~1 KB records over {args.topics} topics "
        f"({args.base} on main; ms, medians; libgit2 fsync on)",
        [
            "records",
            "impyard",
            "snapshot",
            "validate",
            "lane",
            "origin",
            "git add+commit",
            "git durable",
            "vs git",
            "vs durable",
        ],
        rows,
    )


if __name__ == "__main__":
    main()
