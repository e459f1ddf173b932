"""Every command that prints what a box chose shows it escaped, by one rule: a control or
bidirectional character is shown as its escape, never sent to the owner's terminal."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from impyard.home import Home
from impyard.journal.log import Journal
from impyard.knowledge.change import Violation
from impyard.runs.records import manifest as manifests
from impyard.runs.records.model import CheckpointRecord, RepairRecord
from tests.helpers.cli import Cli
from tests.helpers.repo import NS, RUN, make_imp, note_path, note_text
from tests.helpers.tty import run_on_terminal
from tests.unit.test_repair import LONG_BODY, rejected_candidate

#: What a box can put in a file name, a reason or a URL to act on the owner's terminal:
#: bidirectional embeddings, overrides, isolates and marks (which reorder what follows),
#: C0 controls (ESC, BEL, CR, NUL), DEL and C1 controls (CSI, NEL), and a newline that
#: would forge a line of output.
BIDI = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f"
HOSTILE = f"evil{BIDI}\x1b[2J\x07\r\x00\x7f\x9b\x85 txt.md\nFORGED: integrated"
#: A character that must never reach the output (a newline or a tab may: they end a line
#: or align one; a forged line is checked on its own).
UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Home:
    """A refused run whose every box-chosen field (reason, violations, landed files,
    repair detail, box output, receipt URL, journal values) carries ``HOSTILE``."""
    home, repo = make_imp(tmp_path_factory.mktemp("escaping"))
    _, m = rejected_candidate(
        home, repo, {note_path(): note_text(f"{NS}_1", body=LONG_BODY).encode()}
    )
    m.reason = HOSTILE
    m.validation_errors = [Violation(HOSTILE, "bad-name", HOSTILE)]
    m.checkpoints = [
        CheckpointRecord(
            number=1, requested_at="2026-07-11T12:00:00Z", files=[HOSTILE], file_count=1
        )
    ]
    m.repairs = [
        RepairRecord(action="export", kind="candidate", by="owner", at="t", detail=HOSTILE)
    ]
    manifests.write(home, m)
    home.box_log(RUN).write_bytes(HOSTILE.replace("\n", " ").encode())
    receipt = {
        "id": "r1",
        "run": RUN,
        "method": "GET",
        "url": f"https://example.com/{HOSTILE}",
        "status": 200,
        "bytes": 10,
        "sha256": "0" * 64,
        "started_at": "2026-07-11T12:00:00Z",
        "ended_at": "2026-07-11T12:00:01Z",
    }
    home.run_receipts(RUN).write_text(json.dumps(receipt) + "\n")
    Journal(home.journal).record("gateway.request", imp="yuko", run=RUN, url=HOSTILE)
    Journal(home.journal).record(f"box.{HOSTILE}", imp=HOSTILE, run=RUN)
    return home


#: Every command that prints text a box chose, as the owner runs it.
COMMANDS = [
    ("runs", "show", RUN),
    ("runs", "logs", RUN),
    ("runs", "receipts", RUN),
    ("journal",),
    ("candidates", "list"),
    ("candidates", "show", RUN),
]


def assert_escaped(output: str) -> None:
    assert not UNSAFE.search(output), [hex(ord(c)) for c in UNSAFE.findall(output)]
    assert not re.search("^FORGED", output, re.M), output
    # The text is shown, escaped (a terminal may fold it between two escapes).
    assert all(f"\\u{ord(c):04x}" in output for c in BIDI), output


@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
def test_box_text_is_escaped_piped(home: Home, args: tuple[str, ...]) -> None:
    shown = Cli(home=home.root)(*args)
    assert shown.code == 0, shown.stderr
    assert_escaped(shown.stdout + shown.stderr)


@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
def test_box_text_is_escaped_on_a_terminal(home: Home, args: tuple[str, ...]) -> None:
    shown = run_on_terminal(home.root, *args, columns=80, env={"NO_COLOR": "1"})
    assert shown.code == 0, shown.stderr
    assert_escaped(shown.stdout + shown.stderr)


def test_runs_show_escapes_every_field_a_box_chose(home: Home) -> None:
    text = Cli(home=home.root)("runs", "show", RUN).stdout
    escaped = "evil\\u202a\\u202b\\u202c\\u202d\\u202e\\u2066\\u2067\\u2068\\u2069\\u200e\\u200f"
    tail = "\\x1b[2J\\x07\\r\\x00\\x7f\\x9b\\x85 txt.md\\nFORGED: integrated"
    assert re.search(rf"^reason +{re.escape(escaped + tail)}$", text, re.M), text
    assert f"  {escaped}{tail}: bad-name: {escaped}{tail}" in text  # a violation
    assert f"1 file(s): {escaped}{tail}" in text  # a mid-run checkpoint's files
    assert f"(to {escaped}{tail})" in text  # a repair's detail


def test_an_error_quoting_a_name_is_escaped(home: Home) -> None:
    shown = Cli(home=home.root)("runs", "show", f"run-{BIDI}\x1b[2J")
    assert shown.code != 0
    assert len(shown.stderr.splitlines()) == 1, shown.stderr
    assert not UNSAFE.search(shown.stderr), shown.stderr


#: Modules that write to stdout or stderr without ``impyard.common.textsafe``, and why: each
#: prints no text from outside Impyard.
NO_OUTSIDE_TEXT = {
    "entry.py": "the version and an exit code",
    "main.py": "the version (its errors go through _common)",
    "memory.py": "--block: the exact block a run receives, the owner's own memory",
    "service.py": "the systemd unit Impyard writes",
}
WRITES = ("echo", "print", "write")


def _writes_itself(tree: ast.Module) -> bool:
    """Whether ``tree`` calls typer.echo, print or a standard stream's write."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id == "print":
            return True
        if isinstance(func, ast.Attribute) and func.attr in WRITES:
            owner = ast.unparse(func.value)
            if owner in ("typer", "click") or owner.startswith(("sys.std", "self._out")):
                return True
    return False


def _escapes(tree: ast.Module) -> bool:
    """Whether ``tree`` imports the escaping of ``impyard.common.textsafe``."""
    return any(
        isinstance(node, ast.ImportFrom) and node.module == "impyard.common.textsafe"
        for node in ast.walk(tree)
    )


def test_the_cli_prints_only_through_its_escaping_helpers() -> None:
    """A command prints through ``_common`` (echo, warn, error) or ``_table``; a module
    that writes itself (a stream of box output, journal lines) escapes with textsafe."""
    cli = Path(__file__).resolve().parents[2] / "impyard" / "cli"
    stray = []
    for path in sorted(cli.rglob("*.py")):
        tree = ast.parse(path.read_text())
        if _writes_itself(tree) and not _escapes(tree) and path.name not in NO_OUTSIDE_TEXT:
            stray.append(path.name)
    assert not stray
