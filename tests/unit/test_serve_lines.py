"""What ``impyard serve`` says: the events its loop reports (as data) and the lines the CLI
makes of them, without an engine (a stand-in for ``admission.execute``)."""

from __future__ import annotations

import hashlib
import io
import re
import threading
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from impyard.cli.serving.serve_lines import LineWriter, event_line, start_line, stop_line
from impyard.common.errors import EngineError, UsageError
from impyard.home import Home
from impyard.journal.log import Journal
from impyard.knowledge.change import Violation
from impyard.knowledge.checkouts.runspace import DiskSpaceError
from impyard.knowledge.imps import create_imp
from impyard.queue import tasks
from impyard.queue.db import opened
from impyard.runs.drive.context import RunContext
from impyard.runs.host.recovery import Resolution
from impyard.runs.records import manifest as manifests
from impyard.runs.records.model import Manifest, RunOutcome, RunRequest
from impyard.serve import worker as serve_module
from impyard.serve.worker import ServeEvent, Server, ServeStatus
from impyard.settings import load_settings
from impyard.status.engine import EngineVersion
from impyard.status.serve_start import serve_start
from tests.helpers.cli import Cli
from tests.helpers.repo import make_imp, run_id
from tests.helpers.runs import manifest_for

Execute = Callable[[RunContext, RunRequest], RunOutcome]

#: A file name a box chose to clear the owner's screen and forge a line of output.
EVIL_PATH = "records/x/\x1b[2Jok\nFAKE: integrated.md"
AT = datetime(2026, 12, 2, 14, 3, 11, 654321, tzinfo=UTC)
NO_ENGINE = {"DOCKER_HOST": "tcp://127.0.0.1:9"}  # nothing listens: refused at once
#: How serve reports a rejected run of pia's; each test gives the reason the box caused.
PIA_REJECTED = ServeEvent(
    "finished",
    task_id="task-53b766a68ecf",
    run_id="run-20261202T140305Z-ab12cd34",
    imp="pia",
    outcome="rejected",
    at=AT,
)
LINE = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ [^\x00-\x1f\x7f-\x9f]*")


@pytest.fixture
def home(tmp_path: Path) -> Home:
    home, _repo = make_imp(tmp_path, "ada")
    create_imp(home, "bob")
    return home


def manifest(request: RunRequest, number: int) -> Manifest:
    return manifest_for(request, number, container_id=f"c{number}")


def add(home: Home, imp: str, prompt: str) -> str:
    with opened(home.db) as conn:
        return tasks.add(conn, imp, prompt).id


def serve_with(
    home: Home, execute: Execute, monkeypatch: pytest.MonkeyPatch
) -> tuple[list[ServeEvent], ServeStatus]:
    """Serve the queue once with ``execute`` standing in for each run; what it reported."""
    monkeypatch.setattr(serve_module, "execute", execute)
    events: list[ServeEvent] = []
    lock = threading.Lock()

    def report(event: ServeEvent, status: ServeStatus) -> None:
        with lock:
            events.append(event)

    ctx = RunContext(settings=load_settings(home.root), journal=Journal(home.journal))
    server = Server(ctx, concurrency=1, once=True, report=report, gc_interval_seconds=3600)
    server._engine_ok = lambda: True  # type: ignore[method-assign]
    return events, server.serve()


def one_by_prompt(
    ends: dict[str, Callable[[Manifest], None] | Exception],
) -> Execute:
    """Each prompt's run: its box starts, then ``ends[prompt]`` sets how it ended, or is
    raised as admission would raise it (before any box)."""
    numbers = iter(range(1, 100))

    def execute(ctx: RunContext, request: RunRequest) -> RunOutcome:
        end = ends[request.prompt]
        if isinstance(end, Exception):
            raise end
        made = manifest(request, next(numbers))
        assert ctx.on_box_started is not None
        ctx.on_box_started(made)
        end(made)
        return RunOutcome(made)

    return execute


def rejected(m: Manifest) -> None:
    m.checkpoint = "rejected"
    m.validation_errors = [
        Violation(EVIL_PATH, "bad-name", "not a portable name"),
        Violation("organization/x.md", "organization-write", "append runs may not"),
    ]
    m.validation_errors_total = 3  # one more than the manifest kept


def integrated(m: Manifest) -> None:
    m.checkpoint, m.produced_commit = "integrated", "53b766a68ecf0123456789abcdef0123456789ab"


def quarantined(m: Manifest) -> None:
    m.checkpoint, m.reason = "quarantined", "box exited with status 2"


def test_each_task_reports_its_run_outcome_and_first_reason(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second, third = (add(home, "ada", p) for p in ("rejects", "lands", "quarantines"))
    execute = one_by_prompt({"rejects": rejected, "lands": integrated, "quarantines": quarantined})
    events, status = serve_with(home, execute, monkeypatch)
    about = [e for e in events if e.about_a_task]
    assert [(e.task_id, e.run_id, e.imp, e.outcome) for e in about] == [
        (first, run_id(1), "ada", "started"),
        (first, run_id(1), "ada", "rejected"),
        (second, run_id(2), "ada", "started"),
        (second, run_id(2), "ada", "integrated"),
        (third, run_id(3), "ada", "started"),
        (third, run_id(3), "ada", "quarantined"),
    ]
    reject, land, quarantine = about[1], about[3], about[5]
    assert (reject.reason, reject.more_reasons) == (f"{EVIL_PATH}: bad-name", 2)
    assert (land.commit, land.reason) == ("53b766a68ecf0123456789abcdef0123456789ab", None)
    assert (quarantine.reason, quarantine.more_reasons) == ("box exited with status 2", 0)
    assert all(e.at.tzinfo is not None for e in events)
    assert (status.counts["rejected"], status.counts["integrated"]) == (1, 1)


def crashes(m: Manifest) -> None:
    raise RuntimeError("a bug")


def test_a_failed_or_waiting_task_says_why(home: Home, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run that failed after its box started names that run; one refused at admission
    names none, and neither does a task that goes back to the queue."""
    crashing = add(home, "ada", "crashes")
    refused = add(home, "ada", "refused")
    waiting = add(home, "bob", "waits")
    execute = one_by_prompt(
        {
            "crashes": crashes,
            "refused": UsageError("imp 'ada': knowledge is disabled by policy"),
            "waits": DiskSpaceError("the data root is full"),
        }
    )
    events, status = serve_with(home, execute, monkeypatch)
    lines = {e.task_id: (e.outcome, e.run_id, e.reason) for e in events if e.kind != "started"}
    assert lines[crashing] == ("failed", run_id(1), "unexpected RuntimeError: a bug")
    assert lines[refused] == ("failed", None, "imp 'ada': knowledge is disabled by policy")
    assert lines[waiting] == ("waiting", None, "disk space: the data root is full")
    assert status.counts["failed"] == 2


def test_recovery_reports_the_box_it_reattached_and_how_the_run_ended(
    home: Home, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A box a dead serve left running is reported re-attached, not started; its run's
    resolution names its task and first reason, read from the run's manifest."""
    left = manifest(RunRequest("ada", "left running", task_id="task-0123456789ab"), 7)

    def recover_all(ctx: RunContext, on_resolved: Callable[[Resolution], None]) -> list[Resolution]:
        assert ctx.on_box_started is not None
        ctx.on_box_started(left)
        rejected(left)
        home.run_dir(left.run_id).mkdir(parents=True)
        manifests.write(home, left)
        resolution = Resolution(left.run_id, "ada", "running", "reattached", "rejected")
        on_resolved(resolution)
        return [resolution]

    monkeypatch.setattr(serve_module, "recover_all", recover_all)
    events, status = serve_with(home, one_by_prompt({}), monkeypatch)
    reattached, recovered = (e for e in events if e.about_a_task)
    assert (reattached.kind, reattached.task_id, reattached.run_id, reattached.outcome) == (
        "reattached",
        "task-0123456789ab",
        run_id(7),
        "reattached",
    )
    assert (recovered.task_id, recovered.outcome, recovered.reason, recovered.more_reasons) == (
        "task-0123456789ab",
        "rejected",
        f"{EVIL_PATH}: bad-name",
        2,
    )
    assert event_line(recovered) == (
        f"{recovered.at:%Y-%m-%dT%H:%M:%SZ} task task-0123456789ab run {run_id(7)} ada: "
        "rejected: records/x/\\x1b[2Jok\\nFAKE: integrated.md: bad-name (…and 2 more) "
        "(recovered: found running, reattached)"
    )
    assert status.counts["rejected"] == 1


def test_a_rejection_line_escapes_the_path_the_box_chose() -> None:
    event = replace(PIA_REJECTED, reason=f"{EVIL_PATH}: bad-name", more_reasons=2)
    line = event_line(event)
    assert line == (
        "2026-12-02T14:03:11Z task task-53b766a68ecf run run-20261202T140305Z-ab12cd34 pia: "
        "rejected: records/x/\\x1b[2Jok\\nFAKE: integrated.md: bad-name (…and 2 more)"
    )
    assert LINE.fullmatch(line)


def test_task_lines_name_the_commit_the_error_and_a_missing_run() -> None:
    landed = ServeEvent(
        "finished",
        task_id="task-1",
        run_id="run-1",
        imp="ada",
        outcome="integrated",
        commit="53b766a68ecf0123456789abcdef0123456789ab",
        at=AT,
    )
    failed = ServeEvent(
        "failed",
        task_id="task-2",
        imp="ada",
        outcome="failed",
        reason="policy is stale\nrun `impyard deploy`",
        at=AT,
    )
    recovered = ServeEvent(
        "recovered",
        task_id="task-3",
        run_id="run-3",
        imp="ada",
        outcome="quarantined",
        reason="host died while the run was preparing; no box left",
        recovery="found preparing, quarantined",
        at=AT,
    )
    assert event_line(landed) == (
        "2026-12-02T14:03:11Z task task-1 run run-1 ada: integrated 53b766a68ecf"
    )
    assert event_line(failed) == (
        "2026-12-02T14:03:11Z task task-2 run - ada: failed: policy is stale\\nrun `impyard deploy`"
    )
    assert event_line(recovered) == (
        "2026-12-02T14:03:11Z task task-3 run run-3 ada: quarantined: host died while the "
        "run was preparing; no box left (recovered: found preparing, quarantined)"
    )
    assert event_line(ServeEvent("gc", "gc: 2 removed, 0 failed", at=AT)) == (
        "2026-12-02T14:03:11Z gc: 2 removed, 0 failed"
    )
    assert event_line(ServeEvent("status", at=AT)) is None


def test_a_long_reason_stays_one_bounded_line() -> None:
    event = ServeEvent(
        "finished",
        task_id="task-1",
        run_id="run-1",
        imp="ada",
        outcome="rejected",
        reason="records/" + "\x1b" * 5000 + ".md: bad-name",
        at=AT,
    )
    line = event_line(event)
    assert line is not None and LINE.fullmatch(line) and len(line) < 400


class Probe:
    def __init__(self, version: str | None) -> None:
        self._version = version

    def url(self) -> str:
        return "unix:///var/run/docker.sock"

    def version(self) -> EngineVersion:
        if self._version is None:
            raise EngineError("cannot reach the engine: connection refused")
        return EngineVersion(version=self._version, api_version="1.41")

    def has_image(self, image: str) -> bool:
        return True


def test_the_start_line_names_root_imps_policy_and_engine(home: Home) -> None:
    digest = hashlib.sha256(home.compiled_policy.read_bytes()).hexdigest()
    start = serve_start(home, 4, once=False, probe=Probe("27.5.1"))
    assert start.policy.digest == digest
    assert start_line(start, AT) == (
        f"2026-12-02T14:03:11Z impyard serve: data root {home.root}, concurrency 4, "
        f"imps: ada, bob, policy {digest[:12]}, engine 27.5.1"
    )
    home.org_policy.write_text(home.org_policy.read_text() + "\n# edited\n")
    line = start_line(serve_start(home, 1, once=True, probe=Probe(None)), AT)
    assert f"concurrency 1, --once, imps: ada, bob, policy {digest[:12]} (undeployed: " in line
    assert "org.toml changed" in line
    assert line.endswith("engine down: cannot reach the engine: connection refused")
    home.compiled_policy.unlink()
    line = start_line(serve_start(home, 1, once=True, probe=Probe(None)), AT)
    assert ", policy not deployed, " in line


def test_the_start_line_of_a_root_without_imps(tmp_path: Path) -> None:
    home, _repo = make_imp(tmp_path, "ada")
    (home.root / "knowledge" / "ada").rename(home.root / "knowledge" / ".gone")
    assert ", imps: none, " in start_line(serve_start(home, 2, once=False, probe=Probe("1")), AT)


def test_the_stop_line_says_why_and_counts() -> None:
    status = ServeStatus()
    status.counts.update({"integrated": 3, "rejected": 1})
    assert stop_line(status, AT) == (
        "2026-12-02T14:03:11Z impyard serve: stopped (--once): queue drained: queued 0  "
        "landed 3  empty 0  rejected 1  conflict 0  quarantined 0  failed 0"
    )
    status.queued = 2
    assert "stopped (--once): nothing more it can claim now: queued 2" in stop_line(status, AT)
    status.stopped_by = "SIGTERM"
    assert "impyard serve: stopped by SIGTERM: queued 2  landed 3" in stop_line(status, AT)


def test_a_terminal_gets_the_same_lines_and_a_live_status(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # a terminal wide enough for every line
    status = ServeStatus(running=1, queued=2)
    started = ServeEvent("started", task_id="t", run_id="r", imp="ada", outcome="started", at=AT)
    outputs = {}
    for tty in (False, True):
        out = io.StringIO()
        writer = LineWriter(out, tty=tty)
        writer.put("2026-12-02T14:03:11Z impyard serve: data root /x")
        writer.put(event_line(started), status)
        writer.put(None, status)  # only the status changed
        writer.put("2026-12-02T14:03:12Z impyard serve: stopped (--once): queue drained")
        writer.close()
        outputs[tty] = out.getvalue()
    plain = outputs[False]
    assert "\x1b" not in plain and "\r" not in plain and "running 1" not in plain
    assert plain.splitlines() == [
        "2026-12-02T14:03:11Z impyard serve: data root /x",
        "2026-12-02T14:03:11Z task t run r ada: started",
        "2026-12-02T14:03:12Z impyard serve: stopped (--once): queue drained",
    ]
    live = "running 1  queued 2  landed 0"
    shown = outputs[True]
    assert shown.count(live) == 2
    # Erase the live status where each line starts and drop what it drew: the same lines.
    erased = [part.split("\n")[0] for part in shown.split("\r\x1b[K") if part]
    assert [line for line in erased if not line.startswith("running")] == plain.splitlines()


def test_at_80_columns_a_line_folds_between_words_and_the_status_fits_one_row(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A rejection's line is longer than 80 columns, and so is the full live status: a
    terminal would fold both mid-word, and the status's first row would stay on screen."""
    monkeypatch.setenv("COLUMNS", "80")
    status = ServeStatus(running=1, queued=2)
    status.counts.update({"integrated": 3, "quarantined": 1})
    event = replace(
        PIA_REJECTED,
        reason="records/vendors/acme-corporation-single-sign-on.md: file-too-large: "
        "640 characters, the policy allows 300",
    )
    line = event_line(event)
    assert line is not None and len(line) > 80
    outputs = {}
    for tty in (False, True):
        out = io.StringIO()
        writer = LineWriter(out, tty=tty)
        writer.put(line, status)
        writer.close()
        outputs[tty] = out.getvalue()
    assert outputs[False] == line + "\n"  # a log keeps one line per event
    rows = outputs[True].split("\r\x1b[K")[1].split("\n")
    *folded, live = rows
    assert len(folded) > 1 and all(len(row) <= 80 for row in folded), folded
    assert all(row.startswith("    ") for row in folded[1:])  # the rest is indented
    assert " ".join(folded).split() == line.split()  # every word whole, none left out
    assert len(live) < 80, live
    assert live == "running 1 queued 2 landed 3 quarantined 1"  # only the zeros left out


def test_serve_once_prints_its_start_and_stop_lines(home: Home) -> None:
    """Nothing queued: serve starts and stops, saying so, the engine down all along."""
    result = Cli(home=home.root)("serve", "--once", "--concurrency", "3", env=NO_ENGINE)
    assert result.code == 0, result.stderr
    start, stop = result.stdout.splitlines()
    assert LINE.fullmatch(start) and LINE.fullmatch(stop)
    assert f"impyard serve: data root {home.root}, concurrency 3, --once, imps: ada, bob" in start
    assert ", engine down: " in start
    assert stop.endswith(
        "impyard serve: stopped (--once): queue drained: queued 0  landed 0"
        "  empty 0  rejected 0  conflict 0  quarantined 0  failed 0"
    )
