"""Agent overhead: for every agent an imp can run (`impyard.box.images.agents.AGENTS`) whose image
is built in this engine, an Impyard run of the real agent against a bare `docker run` of
the same image holding the same scripted conversation, side by side.

Both sides run the agent's adapter in its image with the same three-turn conversation
(the scripted model server's note script: shell, write, answer) over the agent's own
model API; `bench/agent_sides.py` says what each side does. The Impyard side is
`impyard run` end to end: policy, checkout, gateway credential route, the box, snapshot,
validation and the lane. The pairs are interleaved: each repetition runs every agent's
bare and Impyard run back to back (which goes first alternates), so a load change on the
machine falls on both sides of a pair. Each agent's row reports both medians, their
ratio, and whether it meets the target of at most 1.10x (reported, never asserted: a
shared machine's timing is no test). Both sides must take the same number of model turns
and land a note, or the bench fails.

An agent whose image is not built is skipped with a line saying so (Pi, the production
agent, is required). New agent rows are picked up with no change here.

Each side runs under runc and under runsc (gVisor), the bare side with `--runtime`.

IMPYARD_BENCH_WARM=1 adds a third side per agent and runtime: the Impyard run handed to a
running ``impyard serve`` that keeps one ready box for the imp (``[box.warm]``), paired
with bare runs of its own (target: at most 0.80x the bare run).

IMPYARD_BENCH_REPS (default 7); IMPYARD_BENCH_WARMUP (default 1: runs of each side per
agent before timing, excluded); IMPYARD_BENCH_RUNTIMES (default runc,runsc);
IMPYARD_BENCH_AGENTS (default every agent; comma-separated names);
IMPYARD_BENCH_<AGENT>_IMAGE (e.g. IMPYARD_BENCH_PI_IMAGE, IMPYARD_BENCH_CLAUDE_CODE_IMAGE;
default the row's image) is the image both sides run, so two builds can be compared (e.g.
one built with `scripts/build-agent-box.sh pi impyard-pi:NAME`); IMPYARD_BENCH_BUILD=1 also
times a forced build of each image. IMPYARD_BENCH_MODEL_SECONDS (default 0: the scripted
model answers at once) makes each of the three answers come that long after its request,
as a real model's does: the runtimes' difference is start-up and system calls, so it
weighs less in a run whose turns take time.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Callable

from bench.agent_sides import AgentSides, conversation
from bench.common import ROOT, median, print_table
from impyard.box.images.agents import AGENTS, Agent
from impyard.devtools.model_server import ModelServer

TARGET_RATIO = 1.10
WARM_TARGET_RATIO = 0.80
#: The production agent: the bench fails rather than skip it.
REQUIRED = ("pi",)
MODEL_SECONDS = float(os.environ.get("IMPYARD_BENCH_MODEL_SECONDS", "0"))
WARM = os.environ.get("IMPYARD_BENCH_WARM", "") == "1"


def image_of(agent: Agent) -> str:
    variable = f"IMPYARD_BENCH_{agent.name.upper().replace('-', '_')}_IMAGE"
    return os.environ.get(variable, agent.image)


def chosen_agents() -> list[Agent]:
    names = [n for n in os.environ.get("IMPYARD_BENCH_AGENTS", "").split(",") if n]
    unknown = [n for n in names if n not in AGENTS]
    if unknown:
        raise SystemExit(f"unknown agent {', '.join(unknown)}; choose from {', '.join(AGENTS)}")
    return [AGENTS[n] for n in names] if names else list(AGENTS.values())


def image_size(image: str) -> str | None:
    """The image's size, or None when the engine has no such image."""
    found = subprocess.run(
        ["docker", "image", "inspect", "-f", "{{.Size}}", image],
        capture_output=True,
        text=True,
        check=False,
    )
    return f"{int(found.stdout) / 1e6:.0f} MB" if found.returncode == 0 else None


def build(agent: Agent, image: str) -> str:
    if os.environ.get("IMPYARD_BENCH_BUILD") != "1":
        return "-"
    start = time.perf_counter()
    subprocess.run(
        ["bash", str(ROOT / "scripts" / "build-agent-box.sh"), agent.name, image],
        env={**os.environ, "IMPYARD_REBUILD": "1"},
        check=True,
        capture_output=True,
    )
    return f"{time.perf_counter() - start:.0f} s"


def built_agents() -> list[tuple[Agent, str, str, str]]:
    """(agent, image, size, build time) for each chosen agent whose image is built."""
    found = []
    for agent in chosen_agents():
        image = image_of(agent)
        built = build(agent, image)
        size = image_size(image)
        if size is None:
            if agent.name in REQUIRED:
                raise SystemExit(f"{agent.name}: image {image} is not built ({agent.build_hint})")
            print(f"{agent.name}: skipped, image {image} is not built ({agent.build_hint})")
            continue
        found.append((agent, image, size, built))
    return found


def timed_turns(fn: Callable[[], int]) -> tuple[float, int]:
    start = time.perf_counter()
    turns = fn()
    return (time.perf_counter() - start) * 1000, turns


def run_pairs(
    all_sides: list[AgentSides],
    reps: int,
    turns: dict[str, int],
    ours: Callable[[], int] | None = None,
    settle: Callable[[], None] | None = None,
) -> dict[str, tuple[list[float], ...]]:
    """Per agent: the bare and the Impyard times (``ours``, default its cold run), paired
    and interleaved (and in ``turns``, the model turns each side took). ``settle`` runs,
    untimed, before each side (serve's pool refilled: neither side runs beside it)."""
    times: dict[str, tuple[list[float], ...]] = {s.agent.name: ([], []) for s in all_sides}
    for rep in range(reps):
        for sides in all_sides:
            pair = [(0, sides.bare_run), (1, ours or sides.impyard_run)]
            taken = {}
            for index, side in pair if rep % 2 == 0 else reversed(pair):
                if settle is not None:
                    settle()
                ms, taken[index] = timed_turns(side)
                times[sides.agent.name][index].append(ms)
            if taken[0] != taken[1]:
                raise SystemExit(
                    f"{sides.agent.name}: the bare run took {taken[0]} model turns, "
                    f"the Impyard run {taken[1]}: not the same work"
                )
            turns[sides.agent.name] = taken[0]
    return times


def main() -> None:
    reps = int(os.environ.get("IMPYARD_BENCH_REPS", "7"))
    warmup = int(os.environ.get("IMPYARD_BENCH_WARMUP", "1"))
    runtimes = os.environ.get("IMPYARD_BENCH_RUNTIMES", "runc,runsc").split(",")
    agents = built_agents()
    rows = []
    runc_ms: dict[str, float] = {}
    turns: dict[str, int] = {}
    with contextlib.ExitStack() as stack:
        models = {
            agent.name: stack.enter_context(
                ModelServer(conversation(MODEL_SECONDS), protocol=agent.api)
            )
            for agent, *_ in agents
        }
        for runtime in runtimes:
            all_sides = [
                AgentSides.set_up(agent, image, runtime, models[agent.name], MODEL_SECONDS)
                for agent, image, *_ in agents
            ]
            warm: dict[str, tuple[list[float], ...]] = {}
            try:
                # Warm-up (excluded): page cache for the image and the first checkout layer.
                run_pairs(all_sides, warmup, turns)
                times = run_pairs(all_sides, reps, turns)
                if WARM:
                    for sides in all_sides:
                        with sides.serving_warm():
                            warm |= run_pairs(
                                [sides], reps, turns, sides.warm_run, sides.wait_ready
                            )
            finally:
                for sides in all_sides:
                    sides.tear_down()
            for agent, image, size, built in agents:
                bare, ours = (median(t) for t in times[agent.name])
                warm_bare, warm_ours = (median(t) for t in warm.get(agent.name, ([0.0], [0.0])))
                warm_cells = (
                    (f"{warm_ours:.0f}", f"{warm_ours / warm_bare:.2f}x") if WARM else ("-", "-")
                )
                if runtime == "runc":
                    runc_ms[agent.name] = ours
                ratio = ours / bare
                vs_runc = runc_ms.get(agent.name)
                rows.append(
                    (
                        agent.name,
                        runtime,
                        turns[agent.name],
                        f"{bare:.0f}",
                        f"{ours:.0f}",
                        f"{ratio:.2f}x",
                        "yes" if ratio <= TARGET_RATIO else "no",
                        f"{ours / vs_runc:.2f}x" if vs_runc else "-",
                        *warm_cells,
                        image,
                        size,
                        built,
                    )
                )
    print_table(
        f"Agent runs (the note script, each answer after {MODEL_SECONDS:g} s): impyard run vs "
        f"bare docker run of the same image and work, median of {reps}",
        (
            "agent",
            "runtime",
            "turns",
            "docker run ms",
            "impyard run ms",
            "ratio",
            f"<= {TARGET_RATIO:.2f}x",
            "vs runc",
            "warm via serve ms",
            f"warm ratio (<= {WARM_TARGET_RATIO:.2f}x)",
            "image",
            "size",
            "build",
        ),
        rows,
    )


if __name__ == "__main__":
    main()
