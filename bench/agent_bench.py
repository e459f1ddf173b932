"""Agent overhead: an Impyard run of the real Pi agent against a bare `docker run` of the same
image holding the same scripted conversation, side by side.

Both sides run `pi-imp` in the Pi image with the same three-turn conversation
(`impyard/devtools/model_server.py`'s note script: bash, write, answer). The bare side is what a
`--network none` box minimally needs to reach a model: `docker run -d` under the box's
hardening and the deployed policy's limits (CPU, memory, processes), with the image's
box-init waiting for a ready file, the model server bound straight into the box's
loopback (no gateway, no policy, no checkpoint), `docker wait`, `docker rm`. The Impyard
side is `impyard run` end to end: policy, checkout, gateway credential route, the box,
snapshot, validation and the lane.

Each side runs under runc and under runsc (gVisor), the bare side with `--runtime`.

IMPYARD_BENCH_REPS (default 7); IMPYARD_BENCH_RUNTIMES (default runc,runsc);
IMPYARD_BENCH_PI_IMAGE (default impyard-pi:latest) is the Pi image both sides run, so two
builds can be compared (e.g. one built with `scripts/build-agent-box.sh pi impyard-pi:NAME`);
IMPYARD_BENCH_BUILD=1 also times a forced build of that image. IMPYARD_BENCH_MODEL_SECONDS
(default 0: the scripted model answers at once) makes each of the three answers come that
long after its request, as a real model's does: the runtimes' difference is start-up and
system calls, so it weighs less in a run whose turns take time.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

from bench.common import ROOT, impyard, median, print_table, scratch_dir, timed
from impyard.devtools.model_server import Conversation, ModelServer, Reply, note_script
from impyard.gateway.netns import listen_in_netns
from impyard.home import Home
from impyard.policy.compile import deployed_org_policy
from impyard.policy.models import BoxPolicy

IMAGE = os.environ.get("IMPYARD_BENCH_PI_IMAGE", "impyard-pi:latest")
SECRET = "bench-placeholder-key"
PORT = 3128
MODEL_SECONDS = float(os.environ.get("IMPYARD_BENCH_MODEL_SECONDS", "0"))


def conversation(request: Conversation) -> Reply:
    """The note script, each answer after MODEL_SECONDS."""
    return note_script()(request).after(MODEL_SECONDS)


def setup(model_url: str, runtime: str) -> Path:
    home = scratch_dir("impyard-agentbench-")
    impyard(home, "init", env={"IMPYARD_INIT_RUNTIME": runtime})
    org = home / "policy" / "org.toml"
    org.write_text(
        org.read_text()
        + '\n[box.env]\nIMPYARD_MODEL = "scripted-model"\n'
        + f'\n[[gateway.route]]\nname = "llm"\nupstream = "{model_url}"\n'
        + 'header = "Authorization"\nvalue = "Bearer {secret}"\n'
        + 'secret_env = "IMPYARD_SECRET_LLM"\nmethods = ["POST"]\nallow_private = true\n'
    )
    impyard(home, "deploy")
    impyard(home, "imp", "create", "bench", "--agent", "pi", "--image", IMAGE)
    return home


def impyard_run(home: Path) -> None:
    result = impyard(
        home,
        "run",
        "bench",
        "--prompt",
        "Write one note.",
        "--json",
        check=False,
        env={"IMPYARD_SECRET_LLM": SECRET},
    )
    if result.returncode != 0 or json.loads(result.stdout)["checkpoint"] != "integrated":
        raise SystemExit(f"impyard run failed ({result.returncode}): {result.stderr}")


def bare_run(work: Path, runtime: str, limits: BoxPolicy) -> None:
    """The same box work with plain docker: the model bound into the box's loopback, under
    the limits the Impyard side's box gets (the CPU quota matters most: under runsc,
    gVisor's own kernel works inside it)."""
    knowledge, signal = work / "knowledge", work / "signal"
    shutil.rmtree(knowledge, ignore_errors=True)
    shutil.rmtree(signal, ignore_errors=True)
    (knowledge / "records").mkdir(parents=True)
    signal.mkdir()
    os.chown(knowledge, 65532, 65532)
    os.chown(knowledge / "records", 65532, 65532)
    container = subprocess.run(
        [
            "docker",
            "run",
            "-d",
            "--runtime",
            runtime,
            "--network",
            "none",
            "--read-only",
            "--cap-drop",
            "ALL",
            "--security-opt",
            "no-new-privileges",
            "--user",
            "65532:65532",
            "--tmpfs",
            "/tmp:rw,nosuid,nodev,size=2147483648,mode=1777",
            "--cpus",
            str(limits.cpus),
            "--memory",
            str(limits.memory_bytes),
            "--memory-swap",
            str(limits.memory_bytes),
            "--pids-limit",
            str(limits.pids_limit),
            "-v",
            f"{knowledge}:/opt/impyard/knowledge",
            "-v",
            f"{work / 'task.md'}:/opt/impyard/task.md:ro",
            "-v",
            f"{signal}:/opt/impyard/signal:ro",
            "-e",
            "IMPYARD_MODEL=scripted-model",
            "-e",
            "IMPYARD_KNOWLEDGE_NAMESPACE=n_000000000000",
            "-e",
            f"HTTP_PROXY=http://127.0.0.1:{PORT}",
            "-e",
            "no_proxy=127.0.0.1,localhost,::1",
            "-e",
            "IMPYARD_WAIT_FOR=/opt/impyard/signal/ready",
            "--entrypoint",
            "/opt/impyard/bin/box-init",
            IMAGE,
            "/opt/impyard/bin/pi-imp",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    try:
        pid = int(
            subprocess.run(
                ["docker", "inspect", "-f", "{{.State.Pid}}", container],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        )
        with ModelServer(conversation, sock=listen_in_netns(pid, "127.0.0.1", PORT)):
            (signal / "ready").write_text("ready\n")
            status = subprocess.run(
                ["docker", "wait", container], capture_output=True, text=True, check=True
            ).stdout.strip()
    finally:
        subprocess.run(["docker", "rm", "-f", container], capture_output=True, check=False)
    if status != "0" or not list((knowledge / "records").rglob("*.md")):
        raise SystemExit(f"bare run failed with status {status}")


def image_facts() -> tuple[str, str]:
    size = subprocess.run(
        ["docker", "image", "inspect", "-f", "{{.Size}}", IMAGE],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    build = "not timed (IMPYARD_BENCH_BUILD=1)"
    if os.environ.get("IMPYARD_BENCH_BUILD") == "1":
        start = time.perf_counter()
        subprocess.run(
            ["bash", str(ROOT / "scripts" / "build-agent-box.sh"), "pi", IMAGE],
            env={**os.environ, "IMPYARD_REBUILD": "1"},
            check=True,
            capture_output=True,
        )
        build = f"{time.perf_counter() - start:.0f} s"
    return f"{int(size) / 1e6:.0f} MB", build


def main() -> None:
    reps = int(os.environ.get("IMPYARD_BENCH_REPS", "7"))
    runtimes = os.environ.get("IMPYARD_BENCH_RUNTIMES", "runc,runsc").split(",")
    size, build = image_facts()
    rows = []
    runc_ms: float | None = None
    with ModelServer(conversation) as model:
        for runtime in runtimes:
            home = setup(model.url, runtime)
            limits = deployed_org_policy(Home(home)).box
            work = home / "bare"
            work.mkdir()
            (work / "task.md").write_text("Write one note.\n")
            # Warm-up (excluded): page cache for the image and the first checkout layer.
            impyard_run(home)
            bare_run(work, runtime, limits)
            bare, ours = [], []
            for _ in range(reps):
                bare.append(timed(functools.partial(bare_run, work, runtime, limits)))
                ours.append(timed(functools.partial(impyard_run, home)))
            shutil.rmtree(home, ignore_errors=True)
            if runtime == "runc":
                runc_ms = median(ours)
            rows.append(
                (
                    runtime,
                    f"{median(bare):.0f}",
                    f"{median(ours):.0f}",
                    f"{median(ours) / median(bare):.2f}x",
                    f"{median(ours) / runc_ms:.2f}x" if runc_ms else "-",
                    size,
                    build,
                )
            )
    print_table(
        f"Pi run in {IMAGE} (3 model turns of {MODEL_SECONDS:g} s, one note): impyard run vs "
        f"bare docker run, median of {reps}",
        ("runtime", "docker run ms", "impyard run ms", "ratio", "vs runc", "image", "build"),
        rows,
    )


if __name__ == "__main__":
    main()
