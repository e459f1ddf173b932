"""The engine-features cache is a hint, never an authority: a run whose cached overlay
support turns out wrong (the engine changed under the same key) still runs correctly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from impyard.box.docker import engine
from impyard.dataroot import init_home
from impyard.home import Home
from impyard.journal.log import Journal
from impyard.knowledge.imps import create_imp
from impyard.runs.drive import run_checkout
from impyard.runs.drive.context import RunContext
from impyard.runs.host.admission import execute
from impyard.runs.records import manifest as manifests
from impyard.runs.records.model import RunRequest
from impyard.settings import Settings
from tests.helpers.git import git

pytestmark = pytest.mark.docker

NOTE = 'printf "still here\\n" | impyard-note facts fallback'


def test_a_stale_overlay_answer_falls_back_to_a_copy_and_forgets_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = Home(tmp_path / "home")
    init_home(home)
    create_imp(home, "yuko")
    # The cache claims overlays work on this engine...
    home.engine_features.write_text(
        json.dumps({engine.engine_key(): {"overlay_volumes": True, "probed_at": 0}})
    )
    # ...and the engine cannot mount the run's overlay (as after losing overlay support):
    # the volume is accepted at create and fails only at container start.
    monkeypatch.setattr(
        run_checkout,
        "mount_options",
        lambda checkout: (
            f"lowerdir={tmp_path}/gone,upperdir={checkout.root},workdir={checkout.workdir}"
        ),
    )
    ctx = RunContext(settings=Settings(home=home.root), journal=Journal(home.journal))
    outcome = execute(ctx, RunRequest(imp="yuko", prompt="p", command=NOTE))
    (m,) = manifests.list_all(home)
    assert outcome.exit_code == 0 and m.checkpoint == "integrated", m.reason
    assert m.checkout is not None and m.checkout.kind == "copy"
    events = [e["event"] for e in Journal(home.journal).read(run=m.run_id)]
    assert "checkout.fallback" in events
    assert not home.engine_features.exists()  # the wrong answer is gone: the next run probes
    files = git("-C", home.repo("yuko"), "ls-tree", "-r", "--name-only", "main").stdout
    assert f"records/facts/fallback--{m.namespace}_1.md" in files
