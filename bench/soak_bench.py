"""Soak: a long ``impyard serve`` with retention and backup on stays flat and leaks nothing.

    python -m bench.soak_bench [--tasks 1000] [--imps 10] [--concurrency 4]

One data root (on ``scratch_dir``), ``--imps`` imps running the demo imp (one note per
task), ``--tasks`` tasks queued up front, round-robin over the imps, then one
``impyard serve --once``. The org policy keeps finished runs for ``--keep-seconds``
(retention days may be fractional), runs gc every ``--gc-seconds``, rotates the journal
past ``--journal-max-bytes`` (rotated files are compressed and kept) and backs every imp
up to a local bare remote.

Sampled every ``--sample-seconds`` while serve runs: how many tasks are done, serve's
anonymous RSS (``RssAnon`` in ``/proc/<pid>/status``; file-backed pages are mapped Git
packs) and the data root's size on disk (st_blocks, never following a link), split into the
knowledge repositories (which must grow: every run adds a note), the journal (the live
file, bounded by rotation, and its rotated files: compressed history, kept) and
everything else (run records, spaces, layers: bounded by retention). The curves are printed
as a table; flat means the last third's median is within noise of the second third's.

At the end it checks: every task done and integrated, every imp's main holds one note
per task and equals its backup's main, and no container, volume, mount or run space
of this data root is left. The data root is then removed, or kept when a check failed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple

from bench.common import impyard, print_table, scratch_dir
from impyard.home import Home
from impyard.queue import tasks
from impyard.queue.db import opened


def disk_bytes(root: Path) -> int:
    """Allocated bytes under ``root`` (st_blocks), without following links."""
    total = 0
    stack = [root]
    while stack:
        current = stack.pop()
        try:
            with os.scandir(current) as entries:
                for entry in entries:
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    total += st.st_blocks * 512
                    if entry.is_dir(follow_symlinks=False) and not os.path.ismount(entry.path):
                        stack.append(Path(entry.path))
        except OSError:
            continue
    return total


def rss_bytes(pid: int) -> int | None:
    """Anonymous resident memory: what the process allocated. File-backed pages (Git packs
    libgit2 maps, shared libraries) are page cache the kernel may drop; they grow with
    the knowledge repositories, which must grow."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def setup(args: argparse.Namespace) -> tuple[Path, Path, list[str]]:
    root = scratch_dir("impyard-soak-")
    home, remote = root / "home", root / "backup"
    remote.mkdir()
    impyard(home, "init")
    org = home / "policy" / "org.toml"
    text = org.read_text()
    days = args.keep_seconds / 86400
    for old, new in (
        ("finished_run_days = 30", f"finished_run_days = {days:.8f}"),
        ("gc_interval_seconds = 3600", f"gc_interval_seconds = {args.gc_seconds}"),
        ("journal_max_bytes = 67108864", f"journal_max_bytes = {args.journal_max_bytes}"),
        ("remotes = []", f'remotes = ["{remote}"]'),
    ):
        if old not in text:
            raise SystemExit(f"soak: {old!r} is not in the default org policy any more")
        text = text.replace(old, new)
    org.write_text(text)
    impyard(home, "deploy")
    imps = [f"imp{i:02d}" for i in range(args.imps)]
    for imp in imps:
        impyard(home, "imp", "create", imp)
    with opened(Home(home).db) as conn:
        for n in range(args.tasks):
            imp = imps[n % len(imps)]
            tasks.add(conn, imp, f"soak fact number {n} for {imp}")
    return home, remote, imps


class Sample(NamedTuple):
    seconds: float
    done: int | None  # tasks done so far (None: unreadable)
    rss: int | None
    knowledge: int
    journal: int  # the live journal and its rotated, compressed files
    rest: int


def journal_bytes(home: Path) -> int:
    total = 0
    for path in home.glob("journal*.jsonl*"):
        with contextlib.suppress(OSError):
            total += path.lstat().st_blocks * 512
    return total


def done_tasks(db: Path, total: int) -> int | None:
    """Tasks done so far: all but those still queued or running (gc removes the rows of
    finished ones). Read without writing (serve is the queue's only writer)."""
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5.0)
        try:
            row = conn.execute(
                "SELECT COUNT(*) FROM tasks WHERE state IN ('queued', 'running')"
            ).fetchone()
        finally:
            conn.close()
    except sqlite3.Error:
        return None
    return total - int(row[0])


def sample(home: Path, pid: int, started: float, total: int) -> Sample:
    data = Home(home)
    knowledge = disk_bytes(data.knowledge_dir)
    journal = journal_bytes(home)
    everything = disk_bytes(home)
    return Sample(
        time.monotonic() - started,
        done_tasks(data.db, total),
        rss_bytes(pid),
        knowledge,
        journal,
        everything - knowledge - journal,
    )


def leaks(home: Path, run_ids: set[str]) -> list[str]:
    """Containers and volumes of this soak's runs (others may be running other benches on
    the engine), mounts under its data root and run spaces left with content."""
    found = []
    for what, argv in (
        ("container", ["docker", "ps", "-a", "--format", '{{.ID}} {{.Label "impyard.run"}}']),
        ("volume", ["docker", "volume", "ls", "--format", '{{.Name}} {{.Label "impyard.run"}}']),
    ):
        argv += ["--filter", "label=impyard.run"]
        out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            name, _, run = line.partition(" ")
            if run in run_ids:
                found.append(f"{what} {name} ({run})")
    mounts = Path("/proc/self/mountinfo").read_text()
    found += [f"mount {line.split()[4]}" for line in mounts.splitlines() if str(home) in line]
    spaces = list((home / "runs").glob("*/space"))
    found += [f"run space {p}" for p in spaces if any(p.iterdir())]
    return found


def task_outcomes(
    listed: list[dict[str, Any]], journal: list[dict[str, Any]]
) -> dict[str, tuple[str, str | None]]:
    """Each task's state and run: from ``task list --json`` while its row is kept, and
    from the journal once gc removed it (finished tasks go with their run records)."""
    outcomes = {str(t["id"]): (str(t["state"]), t.get("run_id")) for t in listed}
    for event in journal:
        if event.get("event") == "gc.removed" and event.get("kind") == "task":
            outcomes.setdefault(str(event["id"]), ("done (collected)", event.get("run")))
    return outcomes


def verify(
    home: Path,
    remote: Path,
    imps: list[str],
    total: int,
    outcomes: dict[str, tuple[str, str | None]],
    journal: list[dict[str, Any]],
) -> list[str]:
    problems = []
    done = [run for state, run in outcomes.values() if state.startswith("done")]
    if len(done) != total:
        problems.append(f"{len(done)} of {total} tasks done")
    integrated = {e.get("run") for e in journal if e.get("event") == "knowledge.integrated"}
    landed = sum(1 for run in done if run in integrated)
    if landed != total:
        problems.append(f"{landed} of {total} tasks integrated")
    per_imp = total // len(imps)
    for i, imp in enumerate(imps):
        repo = Home(home).repo(imp)
        listed = subprocess.run(
            ["git", "-C", str(repo), "ls-tree", "-r", "--name-only", "main", "records/"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        names = [name for name in listed if "--n_" in name]  # notes, not records/README.md
        expected = per_imp + (1 if i < total % len(imps) else 0)
        if len(names) != expected:
            problems.append(f"{imp}: {len(names)} notes on main, expected {expected}")
        ours = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "main"], capture_output=True, text=True
        ).stdout.strip()
        theirs = subprocess.run(
            ["git", "-C", str(remote / f"{imp}.git"), "rev-parse", "main"],
            capture_output=True,
            text=True,
        ).stdout.strip()
        if ours != theirs:
            problems.append(f"{imp}: backup main {theirs or 'missing'} != main {ours}")
    return problems


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--imps", type=int, default=10)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--keep-seconds", type=float, default=60.0)
    parser.add_argument("--gc-seconds", type=int, default=20)
    # Small enough that a soak rotates the journal: what stays is compressed history.
    parser.add_argument("--journal-max-bytes", type=int, default=1 << 20)
    parser.add_argument("--sample-seconds", type=float, default=10.0)
    args = parser.parse_args(sys.argv[1:])
    home, remote, imps = setup(args)
    started = time.monotonic()
    env = {**os.environ, "IMPYARD_HOME": str(home)}
    serve = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "impyard",
            "serve",
            "--once",
            "--concurrency",
            str(args.concurrency),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    samples: list[Sample] = []
    while serve.poll() is None:
        samples.append(sample(home, serve.pid, started, args.tasks))
        time.sleep(args.sample_seconds)
    wall = time.monotonic() - started
    _out, err = serve.communicate()
    # One gc after the last run, as a serve that kept running would do.
    impyard(home, "gc")
    samples.append(sample(home, 0, started, args.tasks)._replace(rss=None))
    mib = 2**20
    print_table(
        f"soak: {args.tasks} one-note runs over {args.imps} imps, concurrency "
        f"{args.concurrency}, runs kept {args.keep_seconds:.0f} s, gc every {args.gc_seconds} s",
        [
            "t (s)",
            "runs done",
            "serve RssAnon MiB",
            "knowledge MiB",
            "journal MiB",
            "rest of data root MiB",
        ],
        [
            (
                f"{s.seconds:.0f}",
                "-" if s.done is None else str(s.done),
                "-" if s.rss is None else f"{s.rss / mib:.1f}",
                f"{s.knowledge / mib:.1f}",
                f"{s.journal / mib:.1f}",
                f"{s.rest / mib:.1f}",
            )
            for s in samples
        ],
    )
    thirds = max(1, len(samples) // 3)
    middle, last = samples[thirds : 2 * thirds], samples[2 * thirds : -1]
    for label, field in (("serve RSS", "rss"), ("rest of data root", "rest")):
        mid = [float(v) for s in middle if (v := getattr(s, field)) is not None]
        end = [float(v) for s in last if (v := getattr(s, field)) is not None]
        if mid and end:
            print(
                f"{label}: median {statistics.median(mid) / mib:.1f} MiB in the second third, "
                f"{statistics.median(end) / mib:.1f} MiB in the last"
            )
    print(f"wall {wall:.0f} s, {args.tasks / wall:.1f} runs/s; serve exit {serve.returncode}")
    listed = json.loads(impyard(home, "task", "list", "--json").stdout)
    printed = impyard(home, "journal", "--json").stdout  # JSON lines: one event per line
    journal = [json.loads(line) for line in printed.splitlines()]
    outcomes = task_outcomes(listed, journal)
    run_ids = {str(run) for _state, run in outcomes.values() if run}
    problems = verify(home, remote, imps, args.tasks, outcomes, journal) + leaks(home, run_ids)
    if err.strip():
        print("serve stderr (last lines):", *err.strip().splitlines()[-5:], sep="\n  ")
    print("problems:", *(problems or ["none"]), sep="\n  ")
    if problems or serve.returncode != 0:
        print(f"data root kept for inspection: {home.parent}")
        raise SystemExit(1)
    # Nothing is mounted or running there any more (checked above): safe to remove.
    shutil.rmtree(home.parent)


if __name__ == "__main__":
    main()
