"""Ready boxes that already hold a checkout: an imp's main, made before any run claims.

A ready box's knowledge directory is a mount source fixed when the box started, so a
claim that copies at the run's start made a warm run of a 10,000-record imp take 750 ms
against a cold run's 160 (whose overlay reuses a cached layer). So serve fills a new box,
before it starts, with the checkout of the imp that last asked for its shape, at the
imp's current main, while it is idle (``checkout.prefill_overlay``: the overlay a cold
run gets, mounted by the host, so the run's snapshot reads only what it changed), and
records which (``prefill.json``); the box is ready only once that is done.

Such a box holds that imp's knowledge: only a run of that imp whose base is that commit
may claim it (any other run passes it by, and a box whose imp's main moved on is
replaced). A box with no prefill is claimed by any run of its shape, which copies.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

from impyard.common.fsutil import atomic_write_text
from impyard.home import Home
from impyard.knowledge.checkouts.checkout import prefill_overlay
from impyard.knowledge.store.mainref import read_main
from impyard.runs.provision.boxspec import BOX_KNOWLEDGE
from impyard.runs.ready.pool import PoolBox

PREFILL_FILE = "prefill.json"


def prefill(home: Home, box_dir: Path, knowledge: Path, imp: str, user: str) -> str:
    """Make the box's empty ``knowledge`` dir a checkout of ``imp``'s main and record it;
    the base."""
    base = read_main(home.repo(imp))
    prefill_overlay(home, imp, base, knowledge, user)
    atomic_write_text(box_dir / PREFILL_FILE, json.dumps({"imp": imp, "base": base}))
    return base


def prefilled(box: PoolBox) -> tuple[str, str] | None:
    """(imp, base) of the checkout the box holds; None: it holds none."""
    try:
        raw = json.loads((box.dir / PREFILL_FILE).read_text())
        return str(raw["imp"]), str(raw["base"])
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError):
        # Unreadable: treat it as a checkout of no one's, which no run may take.
        return ("", "")


def fits(box: PoolBox, imp: str, base: str) -> bool:
    """Whether a run of ``imp`` on ``base`` may claim ``box``."""
    held = prefilled(box)
    return held is None or held == (imp, base)


def stale(home: Home, box: PoolBox) -> bool:
    """A prefilled box whose imp's main has moved on (or is gone): no run will claim it."""
    held = prefilled(box)
    if held is None:
        return False
    with contextlib.suppress(Exception):
        return read_main(home.repo(held[0])) != held[1]
    return True


def knowledge_dir(box: PoolBox) -> Path:
    return box.source(BOX_KNOWLEDGE)
