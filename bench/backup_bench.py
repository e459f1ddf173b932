"""Backup bench: what a backup remote costs the lane, up or down.

    python -m bench.backup_bench [--runs 20]

For each remote setup, a fresh imp lands ``--runs`` one-note changes through the
real lane, each followed by ``backup.notify`` (what a run's ending does), in
``--blocks`` blocks that take turns between setups; printed are the median time of
``integrate + notify`` and the median time the background pushes then took to
drain (``backup.flush``). Setups: no remote; a local bare
remote; a ``git daemon`` on loopback (when git has it); a ``git://`` port nobody
listens on; a local path that cannot be created. libgit2 syncs objects as in
production.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from bench.common import scratch_dir
from bench.lane_bench import note_bytes
from impyard import backup
from impyard.backup.status import read_status
from impyard.dataroot import init_home
from impyard.home import Home
from impyard.knowledge.change import Change, FileState, KnowledgeLimits
from impyard.knowledge.imps import create_imp, open_repo
from impyard.knowledge.integration.lane import Trailers, integrate
from impyard.knowledge.store.repo import main_commit
from impyard.policy.compile import deploy
from tests.helpers.gitdaemon import daemon_available, free_port, git_daemon


def set_remotes(home: Home, remotes: list[str]) -> None:
    org = home.org_policy.read_text()
    home.org_policy.write_text(
        org.replace("[backup]\nremotes = []", f"[backup]\nremotes = {json.dumps(remotes)}")
    )
    deploy(home)


def land_note(home: Home, n: int) -> None:
    """One run's one-note change through the real lane, onto the current main."""
    repo = open_repo(home, "bench")
    base = main_commit(repo)
    ns = f"n_{n:012x}"
    data = note_bytes(ns, 1)
    note = FileState(blob=str(repo.create_blob(data)), size=len(data), executable=False)
    run = f"run-20260711T120000Z-{n:010x}"
    trailers = Trailers("bench", run, None, None, base, "append")
    result = integrate(
        home,
        "bench",
        Change(written={f"records/bench/note--{ns}_1.md": note}),
        base=base,
        namespace=ns,
        mode="append",
        limits=KnowledgeLimits(),
        trailers=trailers,
    )
    assert result.checkpoint == "integrated", result


@contextmanager
def nothing(root: Path) -> Iterator[list[str]]:
    yield []


@contextmanager
def local_remote(root: Path) -> Iterator[list[str]]:
    yield [str(root / "backups")]


@contextmanager
def daemon_remote(root: Path) -> Iterator[list[str]]:
    served = root / "served"
    served.mkdir()
    import pygit2

    pygit2.init_repository(str(served / "bench.git"), bare=True)
    with git_daemon(served) as url:
        yield [url]


@contextmanager
def closed_port(root: Path) -> Iterator[list[str]]:
    yield [f"git://127.0.0.1:{free_port()}/"]


@contextmanager
def uncreatable(root: Path) -> Iterator[list[str]]:
    (root / "file").write_text("no directory under a file\n")
    yield [str(root / "file" / "backups")]


SETUPS: list[tuple[str, Callable[[Path], AbstractContextManager[list[str]]]]] = [
    ("no remote", nothing),
    ("up: local bare repo", local_remote),
    ("up: git daemon (loopback)", daemon_remote),
    ("down: git:// closed port", closed_port),
    ("down: path cannot be created", uncreatable),
]


@dataclass
class Setup:
    name: str
    home: Home
    samples: list[float] = field(default_factory=list)
    drains: list[float] = field(default_factory=list)
    landed: int = 0


def land_block(setup: Setup, count: int) -> None:
    """``count`` integrations, each timed with its notify; then the time the pushes took."""
    for _ in range(count):
        setup.landed += 1
        start = time.perf_counter()
        land_note(setup.home, setup.landed)
        backup.notify(setup.home, "bench")
        setup.samples.append((time.perf_counter() - start) * 1000)
    start = time.perf_counter()
    backup.flush(120)
    setup.drains.append((time.perf_counter() - start) * 1000)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=20, help="integrations per remote setup")
    parser.add_argument("--blocks", type=int, default=4, help="interleaved blocks per setup")
    args = parser.parse_args()
    root = scratch_dir("impyard-backup-bench-")
    try:
        with ExitStack() as stack:
            setups: list[Setup] = []
            for name, make in SETUPS:
                if make is daemon_remote and not daemon_available():
                    print(f"{name}: skipped (git has no daemon)")
                    continue
                where = root / f"setup-{len(setups)}"
                where.mkdir()
                home = Home(where / "home")
                init_home(home)
                create_imp(home, "bench")
                set_remotes(home, stack.enter_context(make(where)))
                setups.append(Setup(name, home))
            # Blocks take turns, so the disk's and the machine's moods fall on every setup.
            per_block = max(1, args.runs // args.blocks)
            for _ in range(args.blocks):
                for setup in setups:
                    land_block(setup, per_block)
            print(f"{'remote':32} {'integrate+notify median':>24} {'drain/block':>12}  backup")
            for setup in setups:
                entries = read_status(setup.home).get("bench", {})
                state = ", ".join(
                    "failing" if e.failing else f"pushed {str(e.pushed_main)[:8]}"
                    for e in entries.values()
                )
                lane = statistics.median(setup.samples)
                drain = statistics.median(setup.drains)
                print(
                    f"{setup.name:32} {lane:18.1f} ms (n={len(setup.samples)}) "
                    f"{drain:8.0f} ms  {state or '-'}"
                )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
