"""What a foreground ``impyard run`` loads before its box starts.

Every module loaded before the start request is main-thread time added to the run; what
only a box's exit needs (the lane, quarantine) loads on a side thread while the engine
starts the box (``ENDING_MODULES``). The check runs in a fresh interpreter, as the
command does.
"""

from __future__ import annotations

import subprocess
import sys

from impyard.runs.drive.pipeline import ENDING_MODULES

#: Loaded only for a box's exit: none may be pulled in by the CLI or a run's admission.
EXIT_ONLY = (
    "impyard.runs.drive.endings",
    "impyard.knowledge.integration.lane",
    "impyard.knowledge.integration.lanecheck",
    "impyard.knowledge.integration.quarantine",
    "impyard.knowledge.validation.validate",
    # Git's library too: a run whose base is checked and whose layer is built reads
    # neither (40 ms of imports), only its exit writes objects.
    "pygit2",
)


def loaded_before_start() -> set[str]:
    """The modules a fresh interpreter holds once the CLI and a run's admission are loaded
    (everything the main thread imports before it asks the engine to start the box)."""
    code = (
        "import sys, impyard.cli.main, impyard.runs.host.admission, impyard.cli.running.outcome; "
        "print('\\n'.join(sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    return set(out.split())


def test_a_run_loads_nothing_only_its_exit_needs_before_its_box_starts() -> None:
    loaded = loaded_before_start()
    assert sorted(loaded & set(EXIT_ONLY)) == []


def test_what_only_the_exit_needs_is_loaded_beside_the_box_start() -> None:
    code = (
        "import sys, importlib; "
        + "".join(f"importlib.import_module({name!r}); " for name in ENDING_MODULES)
        + "print('\\n'.join(sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert set(EXIT_ONLY) <= set(out.split())
