"""Control API latency: what a running box waits for when it asks its host
``GET /impyard/check`` or ``POST /impyard/checkpoint``, measured from inside the box.

    python -m bench.control_bench [--records 100000] [--samples 30] [--pending 5]

An agent calls ``impyard-check`` and ``impyard-checkpoint`` in its loop, so
their latency is a cost the agent pays on every call: the targets are a check
in at most 50 ms and a one-note checkpoint in at most 150 ms (medians), on a
knowledge repository of ``--records`` (default 100,000) ~1 KB records.

Method: an imp created with ``--agent pi`` (image impyard-pi:latest, which has
curl) over a repository built with ``add_records`` (its records packed and main's
size cache warmed, as the lane leaves them). A warm-up ``impyard run`` that writes nothing
materializes the base's lower layer (~400 MB at 100,000 records), then
everything is synced, so neither the layer nor its writeback falls into the
measurement. Then one measured ``impyard run`` with an owner ``--command``
script. In the box, the script

1. ``--samples`` (+1 warm-up) times: writes one new valid note with ``impyard-note``, then
   times ``curl -X POST http://127.0.0.1:<gateway>/impyard/checkpoint`` (the
   answer must say ``integrated``);
2. writes ``--pending`` more notes that it does not checkpoint, so each check
   has something to validate (and the run's exit checkpoint lands them);
3. ``--samples`` (+1 warm-up) times: times ``curl http://127.0.0.1:<gateway>/impyard/check``
   (the answer must say ``ok``).

After every timed control request it times, side by side, ``GET /impyard/nope``:
the gateway answers it 404 without any work, so it is the floor of a box-to-
gateway round trip (curl's connect, the gateway's accept and parse). Times
are curl's ``time_total`` (connection to last byte; curl's own start-up is not
in it), printed on the box's stdout and read back with ``impyard runs logs``.
The first request of each kind is a warm-up, shown apart as "first". A run
that checkpoints often must not pay more per checkpoint as they accumulate:
the medians of the first and last third are printed side by side.

The host side of the same requests comes from the run's ``gateway.request``
journal records (``duration_ms``: request parsed to answer sent); box minus host
is transport. The run itself must end integrated.

The owner's org policy raises ``[gateway.budget] control_requests_per_minute``
(default 60, a per-run rate limit) so the loop is never refused. Data lives
under $IMPYARD_BENCH_DIR (default /var/tmp).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import cast

from bench.common import add_records, impyard, median, print_table, remove_data_root, scratch_dir
from impyard.home import Home
from tests.helpers.policy import edit_org

IMP = "bench"
RATE = "control_requests_per_minute"
#: Medians the control API should meet, in ms, as seen from the box.
TARGETS = {"check": 50.0, "checkpoint": 150.0}
PATHS = {"check": "/impyard/check", "checkpoint": "/impyard/checkpoint", "nope": "/impyard/nope"}
TAG = "control-bench"

# POSIX sh (dash in the Pi image). `ask` times one request and insists on its answer, so
# a refused or failed request stops the bench instead of timing an error.
BOX_SCRIPT = """set -eu
port=${HTTP_PROXY##*:}
port=${port%%/*}
url=http://127.0.0.1:$port/impyard
out=${TMPDIR:-/tmp}/control-bench.out
ask() {
    line=$(curl -s --noproxy '*' -X "$2" -o "$out" -w '%{http_code} %{time_total}' "$url/$3")
    if ! grep -q "$4" "$out"; then
        echo "TAG: $1 answered $line: $(head -c 400 "$out")" >&2
        exit 1
    fi
    echo "TAG $1 $line"
}
note() { printf 'bench fact %s\\n' "$1" | impyard-note bench "$1" >/dev/null; }
n=$((SAMPLES + 1))
i=0
while [ "$i" -lt "$n" ]; do
    i=$((i + 1))
    note "checkpointed-$i"
    ask checkpoint POST checkpoint '"outcome": "integrated"'
    ask nope GET nope 'no control endpoint'
done
i=0
while [ "$i" -lt PENDING ]; do
    i=$((i + 1))
    note "pending-$i"
done
i=0
while [ "$i" -lt "$n" ]; do
    i=$((i + 1))
    ask check GET check '"ok": true'
    ask nope GET nope 'no control endpoint'
done
"""


def box_script(samples: int, pending: int) -> str:
    return (
        BOX_SCRIPT.replace("TAG", TAG)
        .replace("SAMPLES", str(samples))
        .replace("PENDING", str(pending))
    )


def setup(records: int) -> Path:
    """A data root whose imp `bench` (Pi image) holds ``records`` notes, published, with
    main's size cached as the lane leaves it (the fixture bypasses the lane; a cold cache
    costs the first validation a walk of the whole tree, ~0.8 s at 100,000 records)."""
    from impyard.knowledge.imps import open_repo
    from impyard.knowledge.integration.origin import publish_origin
    from impyard.knowledge.validation.sizes import tree_bytes

    home = scratch_dir("impyard-controlbench-")
    impyard(home, "init")
    edit_org(home, f"{RATE} = 60", f"{RATE} = 100000")
    impyard(home, "deploy")
    impyard(home, "imp", "create", IMP, "--agent", "pi")
    if records:
        commit = add_records(Home(home).repo(IMP), records, packed=True)
        publish_origin(Home(home), IMP)
        tree_bytes(open_repo(Home(home), IMP), commit)
    return home


def run_box(
    home: Path, script: str, outcome: str = "integrated"
) -> tuple[dict[str, object], str, float]:
    """One run of ``script`` that must end ``outcome``; its run record, box log, wall s."""
    start = time.perf_counter()
    result = impyard(
        home,
        "run",
        IMP,
        "--prompt",
        "control bench",
        "--command",
        script,
        "--timeout",
        "900",
        "--json",
        check=False,
    )
    wall = time.perf_counter() - start
    try:
        record = json.loads(result.stdout)
    except json.JSONDecodeError:
        record = {}
    run_id = str(record.get("run_id", ""))
    log = impyard(home, "runs", "logs", run_id, check=False).stdout if run_id else ""
    if result.returncode != 0 or record.get("checkpoint") != outcome:
        raise SystemExit(
            f"control bench run did not end {outcome} ({result.returncode}):\n"
            f"{result.stdout}{result.stderr}\n{log[-2000:]}"
        )
    return record, log, wall


def box_times(log: str) -> dict[str, list[float]]:
    """Per kind, curl's time_total of each request in order, in ms."""
    times: dict[str, list[float]] = {kind: [] for kind in PATHS}
    for line in log.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[0] == TAG:
            times[parts[1]].append(float(parts[3]) * 1000)
    return times


def host_times(home: Path, run_id: str) -> dict[str, list[float]]:
    """Per kind, the gateway's ``duration_ms`` of each request, in journal order."""
    from impyard.journal.log import Journal

    by_path = {path: kind for kind, path in PATHS.items()}
    times: dict[str, list[float]] = {kind: [] for kind in PATHS}
    for entry in Journal(Home(home).journal).read(run=run_id, event="gateway.request"):
        kind = by_path.get(str(entry.get("path")))
        if kind is not None:
            times[kind].append(float(entry["duration_ms"]))
    return times


def p90(samples: Sequence[float]) -> float:
    return statistics.quantiles(samples, n=10, method="inclusive")[8]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000, help="records already on main")
    parser.add_argument("--samples", type=int, default=30, help="timed requests of each kind")
    parser.add_argument("--pending", type=int, default=5, help="notes each check validates")
    args = parser.parse_args()
    start = time.perf_counter()
    home = setup(args.records)
    setup_s = time.perf_counter() - start
    try:
        # Warm-up run (writes nothing, so main stays the measured run's base): the first
        # run on a base materializes its lower layer, ~400 MB at 100,000 records. Synced
        # after, so its writeback does not fall on the measured checkpoints' fsyncs.
        warm, _, warm_s = run_box(home, "true", outcome="empty")
        os.sync()
        record, log, wall = run_box(home, box_script(args.samples, args.pending))
        box = box_times(log)
        host = host_times(home, str(record["run_id"]))
    finally:
        remove_data_root(home)
    # Every request of a kind is there once, warm-up first: drop it from the statistics.
    expected = {"check": args.samples + 1, "checkpoint": args.samples + 1}
    expected["nope"] = 2 * (args.samples + 1)
    for kind, count in expected.items():
        if len(box[kind]) != count or len(host[kind]) != count:
            raise SystemExit(
                f"{kind}: expected {count} requests, box logged {len(box[kind])}, "
                f"journal {len(host[kind])}"
            )
    floor = median(box["nope"][1:])
    # Transport: each request's box time minus the gateway's time for it (paired in order).
    transport = {
        kind: median([b - h for b, h in zip(box[kind][1:], host[kind][1:], strict=True)])
        for kind in PATHS
    }
    rows = []
    for kind in ("check", "checkpoint", "nope"):
        samples, served = box[kind][1:], host[kind][1:]
        mid, host_mid = median(samples), median(served)
        target = TARGETS.get(kind)
        rows.append(
            (
                "404 baseline" if kind == "nope" else kind,
                f"{mid:.1f}",
                f"{p90(samples):.1f}",
                f"{min(samples):.1f}",
                f"{max(samples):.1f}",
                f"{box[kind][0]:.1f}",
                f"{host_mid:.1f}",
                f"{transport[kind]:.1f}",
                f"{mid / floor:.1f}x",
                "-" if target is None else f"<= {target:.0f}",
                "-" if target is None else ("pass" if mid <= target else "FAIL"),
            )
        )
    prepare = cast(dict[str, float], warm.get("timings_ms", {})).get("prepare", 0.0)
    third = max(1, args.samples // 3)
    checkpoints = box["checkpoint"][1:]
    print(
        f"setup {setup_s:.1f} s ({args.records} records); warm-up run {warm_s:.1f} s "
        f"(prepare {prepare / 1000:.1f} s); measured run {wall:.1f} s, exit checkpoint "
        f"{record['checkpoint']}\ncheckpoint median over the run's first {third} "
        f"checkpoints {median(checkpoints[:third]):.1f} ms, last {third} "
        f"{median(checkpoints[-third:]):.1f} ms (should not grow with the run's checkpoints)"
    )
    print_table(
        f"control API from inside the box at {args.records} records, {args.samples} samples "
        f"each (ms; curl time_total; host = gateway journal duration_ms; box-host = "
        f"transport, paired)",
        (
            "request",
            "median",
            "p90",
            "min",
            "max",
            "first",
            "host median",
            "box-host",
            "vs 404",
            "target",
            "result",
        ),
        rows,
    )


if __name__ == "__main__":
    main()
