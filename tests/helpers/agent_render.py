"""Running ``box/agent-render`` on the host's node over a stand-in agent that prints
canned events, as every agent's parser tests do."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

BOX = Path(__file__).resolve().parents[2] / "box"
RENDER = BOX / "agent-render"
NODE = shutil.which("node")


def needs_node() -> pytest.MarkDecorator:
    """Skip where node is missing, but fail in CI, where the agent image build installs it."""
    if NODE is None and os.environ.get("CI") == "true":
        pytest.fail("node is missing (the agent image build installs it)", pytrace=False)
    return pytest.mark.skipif(NODE is None, reason="node is not installed")


def render_command(name: str) -> list[str]:
    """agent-render running a command as agent ``name``, with that agent's event parser."""
    assert NODE is not None
    return [NODE, str(RENDER), "--name", name, "--parser", str(BOX / name / "events.js"), "--"]


def render_stand_in(
    tmp_path: Path,
    name: str,
    events: Sequence[Any],
    script: str,
    *args: str,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """agent-render running ``/bin/sh -c script EVENTS ARGS`` as agent ``name``, EVENTS
    being a file of ``events``, one JSON line each; no HTTP proxy is passed on."""
    stream = tmp_path / "events.jsonl"
    stream.write_text("".join(json.dumps(e) + "\n" for e in events))
    base = {k: v for k, v in os.environ.items() if k not in ("HTTP_PROXY", "http_proxy")}
    return subprocess.run(
        [*render_command(name), "/bin/sh", "-c", script, str(stream), *args],
        capture_output=True,
        env={**base, **(env or {})},
        timeout=30,
    )


def step_lines(out: bytes, name: str) -> list[str]:
    """The lines of ``out`` agent-render wrote as steps of agent ``name``."""
    return [line for line in out.decode().splitlines() if line.startswith(f"[{name}] ")]
