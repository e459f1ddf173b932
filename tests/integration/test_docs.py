"""Docs are code: every block the README and ``docs/`` mark runnable is run, in order, by
the real ``impyard`` command against a scratch data root, as a newcomer would type it.

A block is runnable when the line before its opening fence is ``<!-- runnable -->``. The
blocks of one file share one scratch directory and data root (as for a newcomer); each
runs under ``bash -euo pipefail``, and a failing command fails the test with the block
and what it printed.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers.git import GIT_ENV

pytestmark = pytest.mark.docker

TOP = Path(__file__).resolve().parents[2]
MARK = "<!-- runnable -->"
_FENCE = re.compile(r"^```(\w*)\s*$")


@dataclass(frozen=True)
class Block:
    path: Path
    line: int
    text: str


def runnable_blocks(path: Path) -> list[Block]:
    """The blocks of ``path`` marked runnable, in order."""
    lines = path.read_text().splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        fence = _FENCE.match(lines[i])
        if fence is None:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        previous = next((lines[k] for k in range(i - 1, -1, -1) if lines[k].strip()), "")
        if previous.strip() == MARK:
            assert fence[1] == "sh", f"{path.name}:{i + 1}: a runnable block must be sh"
            blocks.append(Block(path, i + 1, "\n".join(lines[i + 1 : end]) + "\n"))
        i = end + 1
    return blocks


def documents() -> list[Path]:
    """The README and each page of ``docs/`` that has runnable blocks."""
    docs = sorted((TOP / "docs").glob("*.md")) if (TOP / "docs").is_dir() else []
    return [TOP / "README.md", *(page for page in docs if runnable_blocks(page))]


def test_the_readme_has_runnable_blocks() -> None:
    assert len(runnable_blocks(TOP / "README.md")) >= 3


@pytest.mark.parametrize("document", documents(), ids=lambda p: p.name)
def test_every_runnable_block_runs(document: Path, tmp_path: Path) -> None:
    blocks = runnable_blocks(document)
    work = tmp_path / "work"
    work.mkdir()
    bin_dir = Path(sys.executable).parent
    env = {
        **os.environ,
        **GIT_ENV,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        # Where a per-user data root would go: inside the scratch directory.
        "XDG_DATA_HOME": str(tmp_path / "xdg"),
    }
    env.pop("IMPYARD_HOME", None)
    try:
        for block in blocks:
            proc = subprocess.run(
                ["bash", "-euo", "pipefail", "-c", block.text],
                cwd=work,
                env=env,
                capture_output=True,
                text=True,
                timeout=180,
            )
            where = f"{block.path.name}:{block.line}"
            assert proc.returncode == 0, (
                f"{where} failed ({proc.returncode}):\n{block.text}\n"
                f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
            )
            assert "Traceback" not in proc.stderr, f"{where}:\n{proc.stderr}"
    finally:
        shutil.rmtree(work, ignore_errors=True)


#: A login shell's PATH on Debian (root's, from /etc/profile): what a newcomer's new shell
#: has, with no virtualenv on it.
LOGIN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def test_the_quick_start_runs_in_a_fresh_login_shell(tmp_path: Path) -> None:
    """After the README's setup the quick start is typed into a new shell that knows
    nothing of ``.venv``: ``impyard`` is found on the default PATH (the link bootstrap
    makes) and is this checkout's. Only the test run's own choices pass in (the code
    under test, the engine, the box runtime), never a PATH."""
    quick = runnable_blocks(TOP / "README.md")[0]
    assert quick.text.startswith("impyard init"), quick.text
    user = tmp_path / "user"  # HOME: the default data root is made under it
    user.mkdir()
    kept = ("PYTHONPATH", "DOCKER_HOST", "IMPYARD_INIT_RUNTIME")
    passed = [f"{name}={os.environ[name]}" for name in kept if name in os.environ]
    ours = Path(sys.executable).parent / "impyard"
    script = f'set -euo pipefail\n{quick.text}readlink -f "$(command -v impyard)"\n'
    proc = subprocess.run(
        ["env", "-i", f"HOME={user}", f"PATH={LOGIN_PATH}", *passed, "bash", "-lc", script],
        cwd=user,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert proc.stdout.splitlines()[-1] == str(ours.resolve())
    assert "Traceback" not in proc.stderr
    assert (user / ".local/share/impyard/knowledge/yuko/repo.git").is_dir()
