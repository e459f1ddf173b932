"""``python -m tests.helpers.crash <point> <impyard args>``: the real CLI, SIGKILLed (the
host dies, as with a power cut) at ``point``. Of the first mid-run checkpoint:

    before-ref     the checkpoint's commit is written, main not yet moved
    after-ref      main moved, the manifest not yet told

Of a run's start, as the engine is asked to create its containers:

    probe-created  the overlay probe's box exists (a data root's first run probes)
    roots-created  the container reading the image's CA roots exists
    roots-removed  that container is removed, the box not yet created
    box-created    the box is created, not yet started

Of ``check box``:

    check-network  its network probe box runs (started detached, removed by the check)

The box keeps running; recovery in a fresh process must finish the run. With
``IMPYARD_CRASH_RECORD`` set, every container created is first appended to that file as a
JSON line ``{"id", "kind", "labels"}``, so a test knows what the dead host left on the engine.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from typing import Any

from impyard.box.docker.engineapi import EngineAPI
from impyard.knowledge.integration import lane

CHECKPOINT_POINTS = ("before-ref", "after-ref")
START_POINTS = ("probe-created", "roots-created", "roots-removed", "box-created")
CHECK_POINTS = ("check-network",)
#: The point each kind of container is created at (``LABEL_HELPER``; none: a run's box).
_CREATED = {"overlay-probe": "probe-created", "image-roots": "roots-created", None: "box-created"}


def _mid_run() -> bool:
    # Mid-run checkpoints run on the gateway's connection threads; the exit one does not.
    return threading.current_thread().name == "gateway-conn"


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _at_checkpoint(point: str) -> None:
    original = lane._compare_and_swap_main

    def dying(*args: Any) -> None:
        if _mid_run() and point == "before-ref":
            _die()
        original(*args)
        if _mid_run() and point == "after-ref":
            _die()

    lane._compare_and_swap_main = dying  # type: ignore[assignment]


def _kind(labels: dict[str, str], call: dict[str, Any]) -> str | None:
    """What a create call makes, told without its labels (what a test checks)."""
    if call.get("command") == ["/nonexistent"]:  # never started: only read from
        return "image-roots"
    if labels.get("impyard.run") == "overlay-probe":
        return "overlay-probe"
    return None


def _at_start(point: str) -> None:
    create, remove = EngineAPI.create_container, EngineAPI.remove_container
    record = os.environ.get("IMPYARD_CRASH_RECORD")
    helpers: set[str] = set()

    def creating(self: EngineAPI, image: str, **kwargs: Any) -> dict[str, Any]:
        created = create(self, image, **kwargs)
        labels = dict(kwargs.get("labels") or {})
        kind = _kind(labels, kwargs)
        if record is not None:
            with open(record, "a") as out:
                line = {"id": created["Id"], "kind": kind or "box", "labels": labels}
                out.write(json.dumps(line) + "\n")
        if kind == "image-roots":
            helpers.add(str(created["Id"]))
        if point == _CREATED.get(kind):
            _die()
        return created

    def removing(self: EngineAPI, container_id: str, **kwargs: Any) -> None:
        remove(self, container_id, **kwargs)
        if point == "roots-removed" and container_id in helpers:
            _die()

    EngineAPI.create_container = creating  # type: ignore[method-assign]
    EngineAPI.remove_container = removing  # type: ignore[method-assign]


def _in_check() -> None:
    from impyard.box.checks import check_isolation
    from impyard.box.docker import engine
    from impyard.box.docker.enginehttp import EngineHTTPError

    record = os.environ.get("IMPYARD_CRASH_RECORD")

    def dying(pid: int, *args: Any) -> Any:
        # The check starts its box with the docker CLI: find it by its first process.
        api = engine.api()
        for row in api.containers(all=True) if record is not None else []:
            try:
                info = api.inspect_container(str(row["Id"]))
            except EngineHTTPError:
                continue  # another test's box, removed since the listing
            if (info.get("State") or {}).get("Pid") == pid:
                labels = (info.get("Config") or {}).get("Labels") or {}
                line = {"id": info["Id"], "kind": "check-box", "labels": labels}
                with open(str(record), "a") as out:
                    out.write(json.dumps(line) + "\n")
        _die()

    check_isolation.listen_in_netns = dying  # type: ignore[assignment]


def main() -> None:
    point, argv = sys.argv[1], sys.argv[2:]
    if point in CHECKPOINT_POINTS:
        _at_checkpoint(point)
    elif point in START_POINTS:
        _at_start(point)
    elif point in CHECK_POINTS:
        _in_check()
    else:
        raise SystemExit(f"unknown crash point {point!r}")
    from impyard.cli.main import main as cli_main

    cli_main(argv)


if __name__ == "__main__":
    main()
