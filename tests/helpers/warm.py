"""Ready boxes in docker tests: a real ``impyard serve`` keeping the pools full, the pool
boxes of one data root as the engine lists them, and their removal after a test."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from impyard.box.spec import LABEL_ROOT, root_label
from impyard.runs.ready.pool import LABEL_WARM
from tests.helpers.git import GIT_ENV

#: How long a pool may take to reach its size (boxes start one after another).
FILL_WAIT_SECONDS = 60.0


def _client() -> Any:
    import docker

    return docker.from_env(timeout=10)


def pool_boxes(home: Path, *, all: bool = False) -> dict[str, dict[str, str]]:
    """The pool boxes of the data root ``home`` (running ones unless ``all``): id -> labels."""
    client = _client()
    try:
        found = client.api.containers(
            all=all, filters={"label": [LABEL_WARM, f"{LABEL_ROOT}={root_label(home)}"]}
        )
    finally:
        client.close()
    return {c["Id"]: c["Labels"] for c in found}


def inspect(container_id: str) -> dict[str, Any]:
    client = _client()
    try:
        return dict(client.api.inspect_container(container_id))
    finally:
        client.close()


def inspect_stats(container_id: str) -> dict[str, Any]:
    """One sample of the engine's stats for a box (its cgroup's CPU and memory)."""
    client = _client()
    try:
        return dict(client.api.stats(container_id, stream=False))
    finally:
        client.close()


def kill(container_id: str) -> None:
    client = _client()
    try:
        client.api.kill(container_id)
    finally:
        client.close()


def remove_pool_boxes(home: Path) -> None:
    client = _client()
    try:
        for cid in pool_boxes(home, all=True):
            client.api.remove_container(cid, force=True, v=True)
    finally:
        client.close()


def wait_for(what: str, ready: Callable[[], bool], seconds: float = FILL_WAIT_SECONDS) -> None:
    deadline = time.monotonic() + seconds
    while not ready():
        assert time.monotonic() < deadline, f"{what}: not within {seconds:g}s"
        time.sleep(0.1)


def ready_count(home: Path) -> int:
    """Ready (unclaimed) pool boxes as the data root records them."""
    return len(list((home / "warm").glob("*/*/ready")))


@contextmanager
def serving(home: Path, *args: str) -> Iterator[subprocess.Popen[bytes]]:
    """``impyard serve`` on ``home`` until the block ends (SIGTERM, then waited for)."""
    env = {**os.environ, **GIT_ENV}
    env.pop("IMPYARD_HOME", None)
    # What serve says goes beside the data root, for a failing test's reader.
    with (home.parent / "serve.log").open("a") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "impyard", "--home", str(home), "serve", *args],
            stdout=log,
            stderr=log,
            env=env,
        )
        try:
            yield proc
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
