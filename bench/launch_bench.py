"""Box launch: bare ``docker run --rm <image> true`` (CLI) beside start_box + wait_box (engine API).

``python -m bench.launch_bench [N]``. Runs alternate so machine noise hits both
sides alike; prints medians in ms, the ratio, and the API path per phase.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from impyard.box.docker import engine
from impyard.box.launcher import launch
from impyard.box.spec import BoxSpec, box_labels

IMAGE = os.environ.get("IMPYARD_BENCH_IMAGE", "impyard-box:latest")


def _cli_run() -> float:
    start = time.perf_counter()
    subprocess.run(["docker", "run", "--rm", IMAGE, "true"], check=True, capture_output=True)
    return (time.perf_counter() - start) * 1000


def _api_run(log: Path) -> float:
    spec = BoxSpec(
        image=IMAGE,
        command=["true"],
        labels=box_labels(f"bench-{uuid.uuid4().hex[:8]}", "bench", root=log.parent),
    )
    start = time.perf_counter()
    started = launch.start_box(spec)
    exit_ = launch.wait_box(started.container_id, 60, log)
    elapsed = (time.perf_counter() - start) * 1000
    if not exit_.clean:
        raise SystemExit(f"bench box failed: {exit_}")
    return elapsed


def _phases(log: Path) -> dict[str, float]:
    """One launch timed call by call (the same requests start_box/wait_box make)."""
    api = engine.api()
    spec = BoxSpec(
        image=IMAGE,
        command=["true"],
        labels=box_labels(f"bench-{uuid.uuid4().hex[:8]}", "bench", root=log.parent),
    )
    out: dict[str, float] = {}

    def step(name: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        t = time.perf_counter()
        result = fn(*args, **kwargs)
        out[name] = (time.perf_counter() - t) * 1000
        return result

    image = step("image inspect", api.inspect_image, IMAGE)
    created = step(
        "create",
        api.create_container,
        image["Id"],
        command=spec.command,
        user=spec.user,
        labels=spec.labels,
        network_disabled=True,
        host_config=launch._host_config(spec),
    )
    cid = created["Id"]
    try:
        step("start", api.start, cid)
        step("wait", api.wait, cid)
        step("logs", lambda: b"".join(api.logs(cid)))
        step("inspect", api.inspect_container, cid)
    finally:
        step("remove", api.remove_container, cid, v=True, force=True)
    del log
    return out


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    n = int(args[0]) if args else int(os.environ.get("IMPYARD_BENCH_N", "15"))
    log = Path(tempfile.mkdtemp(prefix="impyard-launch-bench-")) / "box.log"
    # Warm both paths (image cache, client connection) before measuring.
    _cli_run()
    _api_run(log)
    cli: list[float] = []
    api_ms_list: list[float] = []
    phases: list[dict[str, float]] = []
    for _ in range(n):
        cli.append(_cli_run())
        api_ms_list.append(_api_run(log))
        phases.append(_phases(log))
    cli_ms, api_ms = statistics.median(cli), statistics.median(api_ms_list)
    print(f"box launch, {IMAGE}, median of {n}")
    print(f"  {'docker run --rm … true (CLI)':<44} {cli_ms:7.1f} ms")
    print(f"  {'start_box + wait_box (API, hardened, logs)':<44} {api_ms:7.1f} ms")
    print(f"  {'ratio API / CLI':<44} {api_ms / cli_ms:7.2f}")
    print("  API phases (median ms): ", end="")
    print(
        ", ".join(f"{name} {statistics.median(p[name] for p in phases):.1f}" for name in phases[0])
    )
    shutil.rmtree(log.parent)  # box.log and the live directory beside it


if __name__ == "__main__":
    main()
