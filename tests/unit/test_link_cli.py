"""Bootstrap's linking step (``scripts/link-cli.sh``): ``impyard`` on a new shell's PATH
through a link to the bootstrapped checkout's ``.venv/bin/impyard``, never over a file
something else put there. Run against a checkout and a bin directory made here."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "link-cli.sh"


@dataclass(frozen=True)
class Setup:
    checkout: Path
    bin_dir: Path

    @property
    def target(self) -> Path:
        return self.checkout / ".venv" / "bin" / "impyard"

    @property
    def link(self) -> Path:
        return self.bin_dir / "impyard"

    def run(self) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "IMPYARD_LINK_DIR": str(self.bin_dir)}
        return subprocess.run(
            ["bash", str(SCRIPT), str(self.checkout)],
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
        )


@pytest.fixture
def setup(tmp_path: Path) -> Setup:
    made = Setup(tmp_path / "clone", tmp_path / "bin")
    made.target.parent.mkdir(parents=True)
    made.target.write_text('#!/bin/sh\necho "impyard from the clone: $*"\n')
    made.target.chmod(0o755)
    made.bin_dir.mkdir()
    return made


def test_a_free_name_is_linked_once_and_says_so(setup: Setup) -> None:
    done = setup.run()
    assert done.returncode == 0, done.stderr
    assert os.readlink(setup.link) == str(setup.target)
    assert done.stdout == (
        f"bootstrap: linked {setup.link} -> {setup.target}: impyard works in any new shell\n"
    )
    ran = subprocess.run([str(setup.link), "init"], capture_output=True, text=True, check=True)
    assert ran.stdout == "impyard from the clone: init\n"
    again = setup.run()  # a finished bootstrap is quiet
    assert (again.returncode, again.stdout, again.stderr) == (0, "", "")
    assert sorted(p.name for p in setup.bin_dir.iterdir()) == ["impyard"]


def test_a_link_to_another_checkout_is_repointed_here(setup: Setup) -> None:
    old = "/srv/old-clone/.venv/bin/impyard"  # a clone CI removed since
    setup.link.symlink_to(old)
    done = setup.run()
    assert done.returncode == 0, done.stderr
    assert os.readlink(setup.link) == str(setup.target)
    assert f"(was -> {old})" in done.stdout


@pytest.mark.parametrize("kind", ["file", "link"])
def test_a_name_something_else_owns_is_left_alone_and_named(setup: Setup, kind: str) -> None:
    if kind == "file":
        setup.link.write_text("#!/bin/sh\necho pip's impyard\n")
    else:
        setup.link.symlink_to("/opt/other-tool/bin/impyard")
    before = (setup.link.is_symlink(), os.readlink(setup.link) if kind == "link" else None)
    done = setup.run()
    assert done.returncode == 0  # bootstrap goes on; the venv's impyard still works
    assert (setup.link.is_symlink(), os.readlink(setup.link) if kind == "link" else None) == before
    if kind == "file":
        assert setup.link.read_text() == "#!/bin/sh\necho pip's impyard\n"
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"bootstrap: {setup.link} ") and "left alone" in line
    assert line.endswith(f"run {setup.target}, or add {setup.target.parent} to PATH")
