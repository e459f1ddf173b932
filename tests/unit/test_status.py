"""``impyard status``: each problem it claims to report, and a clean exit when healthy.

No engine is needed: a test probe stands in for it, and the real probe is pointed at a
socket that does not exist to see an engine that is down."""

from __future__ import annotations

import fcntl
import gc
import json
import os
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pygit2
import pytest

from impyard.common.errors import EngineError
from impyard.home import Home
from impyard.knowledge.imps import ImpSettings, create_imp, open_repo
from impyard.knowledge.store.repo import MAIN
from impyard.policy.compile import deploy
from impyard.queue import leases, tasks
from impyard.queue.db import opened
from impyard.serve.record import read_records, recorded
from impyard.settings import Settings
from impyard.status import collect as collect_module
from impyard.status.collect import collect
from impyard.status.disk import usage
from impyard.status.engine import EngineVersion
from impyard.status.model import Problem, Status
from tests.helpers.cli import Cli
from tests.helpers.policy import edit_org
from tests.helpers.repo import make_imp

DEAD_ENGINE = "unix:///nonexistent.sock"
RUN = "run-20260711T120000Z-0123456789"


class FakeProbe:
    """An engine that answers: every image present but those named ``missing``."""

    def __init__(self, missing: tuple[str, ...] = (), down: bool = False) -> None:
        self.missing = missing
        self.down = down
        self.asked: list[str] = []

    def url(self) -> str:
        return "unix:///fake.sock"

    def version(self) -> EngineVersion:
        if self.down:
            raise EngineError("cannot reach the Docker engine at unix:///fake.sock: refused")
        return EngineVersion(version="27.3.1", api_version="1.47")

    def has_image(self, image: str) -> bool:
        self.asked.append(image)
        return image not in self.missing


def fake_statvfs(free_ratio: float) -> object:
    blocks = 1_000_000

    def statvfs(path: str) -> os.statvfs_result:
        free = int(blocks * free_ratio)
        return os.statvfs_result((4096, 4096, blocks, free, free, 1000, 1000, 1000, 0, 255))

    return statvfs


def status_of(home: Home, **kw: object) -> Status:
    kw.setdefault("probe", FakeProbe())
    kw.setdefault("statvfs", fake_statvfs(0.5))
    return collect(home, Settings(home=home.root), **kw)  # type: ignore[arg-type]


def codes(found: list[Problem]) -> list[str]:
    return [p.code for p in found]


@pytest.fixture
def home(tmp_path: Path) -> Home:
    home, _repo = make_imp(tmp_path)
    return home


@pytest.fixture
def dead_engine() -> Iterator[dict[str, str]]:
    """``DOCKER_HOST`` naming a socket that does not exist. docker-py leaves the socket of
    a failed unix connect to the garbage collector: it is collected here, where its
    ResourceWarning is expected, not in whichever test runs next."""
    yield {"DOCKER_HOST": DEAD_ENGINE}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()


@pytest.fixture
def healthy_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI's engine probe answers, and the test machine's own disk cannot fail it."""
    monkeypatch.setattr(collect_module, "DockerProbe", FakeProbe)
    monkeypatch.setattr(collect_module, "MIN_FREE_RATIO", 0.0)


# -- the whole screen --------------------------------------------------------------------


def test_a_healthy_data_root_exits_zero(cli: Cli, healthy_engine: None) -> None:
    assert cli("init").code == 0
    assert cli("imp", "create", "yuko").code == 0
    result = cli("status")
    assert result.code == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("impyard status")
    for label in ("engine", "images", "serve", "queue", "runs", "leases", "knowledge"):
        assert any(line.startswith(label + " ") for line in lines), label
    for label in ("backup", "disk", "policy", "problems"):
        assert any(line.startswith(label + " ") for line in lines), label
    assert "ok  docker 27.3.1 (API 1.47)" in result.stdout
    assert "problems   none" in result.stdout
    document = json.loads(cli("status", "--json").stdout)
    assert document["ok"] is True
    assert document["problems"] == []
    assert [i["state"] for i in document["images"]] == ["present"]


def test_status_needs_an_initialized_data_root(cli: Cli) -> None:
    result = cli("status")
    assert result.code == 2
    assert "impyard init" in result.stderr


# -- engine and images -------------------------------------------------------------------


#: docker-py leaves the socket of a failed unix connect to the garbage collector.
unclosed_engine_socket = pytest.mark.filterwarnings("ignore::ResourceWarning")


@unclosed_engine_socket
def test_an_engine_that_is_down_is_a_problem_and_images_are_unknown_not_missing(
    cli: Cli, monkeypatch: pytest.MonkeyPatch, dead_engine: dict[str, str]
) -> None:
    monkeypatch.setattr(collect_module, "MIN_FREE_RATIO", 0.0)
    assert cli("init").code == 0
    result = cli("status", "--json", env=dead_engine)
    assert result.code == 1
    document = json.loads(result.stdout)
    assert document["engine"]["reachable"] is False
    assert "nonexistent.sock" in document["engine"]["error"]
    assert [i["state"] for i in document["images"]] == ["unknown"]
    assert [p["code"] for p in document["problems"]] == ["engine-down"]
    assert "1 problem(s): engine-down" in result.stderr
    text = cli("status", env=dead_engine)
    assert text.code == 1
    assert "engine     DOWN" in text.stdout
    assert "impyard-box:latest unknown (org policy)" in text.stdout
    assert "Traceback" not in text.stderr


def test_the_engine_check_gives_up_within_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    """The real probe asks with a short timeout, and puts the usual one back."""
    from impyard.box.docker import engine
    from impyard.status.engine import ENGINE_TIMEOUT_SECONDS, DockerProbe

    seen: list[float] = []

    def fake_call(what: str, fn: object, *args: object, **kwargs: object) -> dict[str, str]:
        seen.append(engine._timeout())
        return {"Version": "1", "ApiVersion": "1.41"}

    monkeypatch.setattr(engine, "call", fake_call)
    monkeypatch.setattr(engine, "api", lambda: type("Api", (), {"version": None})())
    before = engine._default_timeout
    assert DockerProbe().version() == EngineVersion("1", "1.41")
    assert seen == [ENGINE_TIMEOUT_SECONDS] and ENGINE_TIMEOUT_SECONDS <= 3
    assert engine._default_timeout == before


def test_missing_images_are_problems_naming_who_needs_them(tmp_path: Path) -> None:
    home = Home(tmp_path / "home")
    make_imp(tmp_path, "yuko")
    create_imp(home, "mika", ImpSettings(image="impyard-pi:latest"))
    probe = FakeProbe(missing=("impyard-pi:latest",))
    status = status_of(home, probe=probe)
    states = {i.image: (i.state, i.used_by) for i in status.images}
    assert states == {
        "impyard-box:latest": ("present", ["org policy", "imp yuko"]),
        "impyard-pi:latest": ("missing", ["imp mika"]),
    }
    assert codes(status.problems) == ["image-missing"]
    assert "imp mika" in status.problems[0].message
    assert "just box-pi" in status.problems[0].message


def test_images_of_an_imps_policy_overlay_are_checked(home: Home) -> None:
    home.imp_policy("yuko").write_text('[box]\nimage = "custom:1"\n')
    deploy(home)
    status = status_of(home, probe=FakeProbe(missing=("custom:1",)))
    assert {i.image: i.state for i in status.images} == {
        "impyard-box:latest": "present",
        "custom:1": "missing",
    }


# -- policy ------------------------------------------------------------------------------


def test_editing_org_toml_without_deploying_is_a_problem_until_deploy(home: Home) -> None:
    assert status_of(home).problems == []
    edit_org(home.root, "pids_limit = 256", "pids_limit = 128")
    status = status_of(home)
    assert codes(status.problems) == ["policy-not-deployed"]
    assert "org.toml changed" in status.problems[0].message
    assert "impyard deploy" in status.problems[0].message
    assert status.policy.deployed is False
    deploy(home)
    status = status_of(home)
    assert status.problems == [] and status.policy.deployed


def test_a_broken_policy_file_is_named_with_its_line_and_error(
    cli: Cli, healthy_engine: None
) -> None:
    assert cli("init").code == 0
    org = cli.home / "policy" / "org.toml"
    lines = org.read_text().splitlines()
    at = lines.index("[box]")
    lines[at] = "[box"  # an unclosed table header: not TOML
    org.write_text("\n".join(lines) + "\n")

    result = cli("status")

    assert result.code == 1
    (problem,) = [line for line in result.stdout.splitlines() if line.startswith("PROBLEM")]
    assert problem.startswith("PROBLEM  policy-not-deployed: org.toml changed, and a deploy ")
    error = "not valid TOML: Expected ']' at the end of a table declaration"
    assert f"{org}: line {at + 1}, column 5: {error}" in problem
    assert problem.endswith("fix it, then run `impyard deploy`")


def test_an_overlay_added_or_removed_since_deploy_is_not_deployed(home: Home) -> None:
    overlay = home.imp_policy("yuko")
    overlay.write_text("[box]\npids_limit = 100\n")
    assert status_of(home).policy.changes == ["imps/yuko.toml was added"]
    deploy(home)
    assert status_of(home).policy.deployed
    overlay.unlink()
    assert status_of(home).policy.changes == ["imps/yuko.toml was removed"]


def test_touching_a_policy_file_is_no_change(home: Home) -> None:
    os.utime(home.org_policy, (1, 1))
    assert status_of(home).policy.deployed


# -- disk --------------------------------------------------------------------------------


def test_under_ten_percent_free_is_a_problem(home: Home) -> None:
    status = status_of(home, statvfs=fake_statvfs(0.05))
    assert codes(status.problems) == ["disk-low"]
    assert "5.0% free" in status.problems[0].message
    assert status_of(home, statvfs=fake_statvfs(0.11)).problems == []
    # The threshold is the caller's to choose.
    assert codes(status_of(home, statvfs=fake_statvfs(0.3), min_free_ratio=0.5).problems) == [
        "disk-low"
    ]


def test_disk_use_counts_blocks_once_never_follows_links_and_is_bounded(tmp_path: Path) -> None:
    part = tmp_path / "part"
    (part / "a" / "b").mkdir(parents=True)
    data = part / "a" / "data"
    data.write_bytes(b"x" * 1024 * 1024)
    os.link(data, part / "a" / "b" / "same")  # a hard link counts once
    outside = tmp_path / "outside"
    outside.write_bytes(b"y" * 4 * 1024 * 1024)
    os.symlink(outside, part / "link")  # never followed
    os.symlink(tmp_path, part / "a" / "loop")
    os.mkfifo(part / "fifo")  # never opened
    sparse = part / "sparse.img"
    with sparse.open("wb") as handle:
        handle.truncate(512 * 1024 * 1024)  # 512 MiB apparent, nearly nothing allocated
    (found,) = usage({"part": [part]})
    assert found.complete
    assert 1024 * 1024 <= found.bytes < 2 * 1024 * 1024
    deep = part
    for _ in range(80):
        deep = deep / "d"
    deep.mkdir(parents=True)
    (found,) = usage({"part": [part]})
    assert not found.complete  # deeper than the walk goes: a floor, and said so


def test_disk_use_is_reported_per_part(home: Home) -> None:
    run_dir = home.run_dir(RUN)
    run_dir.mkdir(parents=True)
    (run_dir / "box.log").write_bytes(b"z" * 256 * 1024)
    parts = {u.name: u for u in status_of(home).disk.usage}
    assert list(parts) == ["runs", "layers", "archive", "repos"]
    assert parts["runs"].bytes >= 256 * 1024
    assert parts["repos"].bytes > 0
    assert parts["archive"].bytes == 0


# -- backup ------------------------------------------------------------------------------


def _second_commit(home: Home, imp: str = "yuko") -> tuple[str, str]:
    """Move main one commit on; return (old main, new main)."""
    repo = open_repo(home, imp)
    old = repo.references[MAIN].target
    sig = pygit2.Signature("t", "t@example.com")
    tree = repo[old].peel(pygit2.Tree).id
    new = repo.create_commit(MAIN, sig, sig, "next\n", tree, [old])
    return str(old), str(new)


def _write_backup_status(home: Home, document: object) -> None:
    home.backup_status.parent.mkdir(parents=True, exist_ok=True)
    home.backup_status.write_text(json.dumps(document))


def _configure_remotes(home: Home, *remotes: str) -> None:
    listed = ", ".join(json.dumps(r) for r in remotes)
    edit_org(home.root, "[backup]\nremotes = []", f"[backup]\nremotes = [{listed}]")
    deploy(home)


def test_backup_failing_is_a_problem_and_lagging_a_warning(home: Home) -> None:
    old, new = _second_commit(home)
    _write_backup_status(
        home,
        {
            "yuko": {
                "/srv/a": {"pushed_at": "2026-07-11T12:00:00Z", "pushed_main": new},
                "/srv/b": {"pushed_at": "2026-07-11T11:00:00Z", "pushed_main": old},
                "ssh://h/c": {
                    "pushed_at": "2026-07-11T10:00:00Z",
                    "pushed_main": old,
                    "last_error": "connection refused\nmore detail",
                    "failing_since": "2026-07-11T10:30:00Z",
                    "attempts": 4,
                },
            }
        },
    )
    _configure_remotes(home, "/srv/a", "/srv/b", "ssh://h/c")
    status = status_of(home)
    remotes = {r.remote: r for r in status.backup.imps[0].remotes}
    assert remotes["/srv/a"].state == "current" and remotes["/srv/a"].behind == 0
    assert remotes["/srv/b"].state == "lagging" and remotes["/srv/b"].behind == 1
    assert remotes["ssh://h/c"].state == "failing" and remotes["ssh://h/c"].attempts == 4
    assert codes(status.problems) == ["backup-failing"]
    message = status.problems[0].message
    assert "yuko" in message and "ssh://h/c" in message and "2026-07-11T10:30:00Z" in message
    assert message.endswith("connection refused")  # one line
    assert codes(status.warnings) == ["backup-lagging"]
    assert "1 commit(s) behind" in status.warnings[0].message


def test_configured_remotes_without_status_report_never_backed_up(home: Home) -> None:
    _configure_remotes(home, "/srv/backup")
    status = status_of(home)
    assert status.backup.configured_remotes == 1
    assert status.backup.imps[0].never_backed_up
    assert codes(status.warnings) == ["backup-never"]
    assert status.problems == []  # worth a look, not a failure


def test_no_remotes_no_status_is_not_configured(home: Home) -> None:
    status = status_of(home)
    assert status.backup.imps == [] and status.warnings == [] and status.problems == []


def test_an_unreadable_backup_status_is_a_warning(home: Home) -> None:
    home.backup_status.parent.mkdir(parents=True, exist_ok=True)
    home.backup_status.write_text("{not json")
    assert codes(status_of(home).warnings) == ["backup-status-unreadable"]


# -- knowledge, queue, runs, leases ------------------------------------------------------


def test_pending_quarantines_and_candidates_are_counted_per_imp(tmp_path: Path) -> None:
    home, repo = make_imp(tmp_path, "yuko")
    create_imp(home, "mika")
    main = repo.references[MAIN].target
    for n in range(3):
        repo.references.create(f"refs/quarantine/run-20260711T12000{n}Z-0123456789", main)
    repo.references.create(f"refs/candidates/{RUN}", main)
    found = {k.imp: (k.quarantines, k.candidates) for k in status_of(home).knowledge}
    assert found == {"mika": (0, 0), "yuko": (3, 1)}


@unclosed_engine_socket
def test_queue_depth_leases_and_unfinished_runs(
    home: Home, cli: Cli, dead_engine: dict[str, str]
) -> None:
    with opened(home.db) as conn:
        first = tasks.add(conn, "yuko", "one")
        tasks.add(conn, "yuko", "two")
        third = tasks.add(conn, "yuko", "three")
        tasks.cancel(conn, third.id)
        assert tasks.claim_next(conn, set()) == tasks.get(conn, first.id)
        leases.acquire(conn, "yuko", RUN, 120)
    started = datetime.now(UTC) - timedelta(minutes=5)
    home.run_dir(RUN).mkdir(parents=True)
    manifest = {"run_id": RUN, "imp": "yuko", "mode": "reorganize", "state": "running"}
    manifest["started_at"] = started.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    home.manifest(RUN).write_text(json.dumps(manifest))
    done = "run-20260711T110000Z-0123456789"
    home.run_dir(done).mkdir()
    home.manifest(done).write_text(json.dumps({"run_id": done, "state": "finished"}))
    status = status_of(home)
    assert status.queue.counts == {
        "queued": 1,
        "running": 1,
        "done": 0,
        "failed": 0,
        "cancelled": 1,
    }
    assert status.queue.oldest_queued_at is not None
    (lease,) = status.leases
    assert (lease.imp, lease.holder, lease.live) == ("yuko", RUN, True)
    (run,) = status.runs
    assert (run.run_id, run.state, run.mode) == (RUN, "running", "reorganize")
    assert run.age_seconds is not None and 290 < run.age_seconds < 400
    text = cli("status", env=dead_engine).stdout
    assert "queued 1" in text and "running 1" in text and "cancelled 1" in text
    assert f"{RUN}  yuko  reorganize  running  5m" in text
    assert f"yuko: {RUN} (heartbeat" in text


def test_an_expired_lease_is_shown_as_expired(home: Home) -> None:
    with opened(home.db) as conn:
        leases.acquire(conn, "yuko", RUN, 120)
        conn.execute("UPDATE leases SET heartbeat_at = heartbeat_at - 1000")
    (lease,) = status_of(home).leases
    assert not lease.live and lease.heartbeat_age_seconds >= 1000


def test_an_unreadable_queue_is_a_problem(home: Home) -> None:
    home.db.unlink()
    home.db.mkdir()  # sqlite cannot open a directory
    assert "queue-unreadable" in codes(status_of(home).problems)


#: Holds the queue database the way nothing can read past: a write transaction in
#: exclusive locking mode (a plain WAL writer never blocks readers). Holds it until its
#: stdin closes.
LOCKER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("PRAGMA locking_mode=EXCLUSIVE")
conn.execute("BEGIN EXCLUSIVE")
conn.execute("INSERT INTO leases VALUES ('held', 'run-x', 0, 0)")
print("locked", flush=True)
sys.stdin.read()
"""


@pytest.mark.timeout(90)
def test_a_locked_queue_database_is_a_problem_row_not_a_hang(
    tmp_path: Path, dead_engine: dict[str, str]
) -> None:
    """Status waits for the database only briefly (SQLite's usual busy timeout made it
    answer after 30 s) and says it is locked; timed as a real command, printed."""
    cli = Cli(home=tmp_path / "home", in_process=False)
    assert cli("init").code == 0
    assert cli("imp", "create", "yuko").code == 0
    locker = subprocess.Popen(
        [sys.executable, "-c", LOCKER, str(Home(cli.home).db)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert locker.stdout is not None and locker.stdout.readline() == "locked\n"
        started = time.monotonic()
        text = cli("status", env=dead_engine)
        took = time.monotonic() - started
        document = cli("status", "--json", env=dead_engine)
    finally:
        assert locker.stdin is not None
        locker.stdin.close()
        locker.wait(10)
        assert locker.stdout is not None
        locker.stdout.close()
    print(f"status with the queue database locked answered in {took:.2f} s")
    assert text.code == 1 and "Traceback" not in text.stderr
    lines = text.stdout.splitlines()
    [queue] = [line for line in lines if line.startswith("queue ")]
    assert queue.startswith("queue      LOCKED  queue database locked: ")
    assert "held by another process" in queue
    assert [line for line in lines if "queue-locked" in line] == [
        f"PROBLEM  queue-locked: {queue.split('LOCKED  ', 1)[1]}"
    ]
    assert "queue-locked" in text.stderr
    found = json.loads(document.stdout)
    assert found["queue"]["locked"] is True
    assert "queue-locked" in [p["code"] for p in found["problems"]]
    assert "queue-unreadable" not in [p["code"] for p in found["problems"]]


# -- serve -------------------------------------------------------------------------------


def test_a_live_serve_is_found_by_its_locked_record(home: Home) -> None:
    assert status_of(home).serve.running is False
    with recorded(home, 3, once=False) as path:
        assert path == home.serve_record(os.getpid())
        serve = status_of(home).serve
        assert serve.running
        (process,) = serve.processes
        assert (process.pid, process.concurrency, process.once) == (os.getpid(), 3, False)
        assert process.started_at is not None
    assert not home.serve_record(os.getpid()).exists()
    assert status_of(home).serve.running is False


def test_a_record_left_by_a_dead_serve_is_stale_and_the_next_serve_removes_it(
    home: Home,
) -> None:
    home.serve_dir.mkdir()
    stale = home.serve_record(999_999)
    stale.write_text(json.dumps({"pid": 999_999, "concurrency": 2}))
    status = status_of(home)
    assert status.serve.running is False
    assert status.serve.stale_pids == [999_999]
    assert codes(status.warnings) == ["serve-died"]
    assert status.problems == []
    with recorded(home, 1, once=True):
        assert not stale.exists()
        assert [r.pid for r in read_records(home)] == [os.getpid()]


def test_a_record_whose_lock_another_process_holds_is_live(home: Home) -> None:
    """What serve does, by hand: a live flock on a record marks its serve alive."""
    home.serve_dir.mkdir()
    path = home.serve_record(424_242)
    path.write_text(json.dumps({"pid": 424_242, "concurrency": 5, "started_at": "x"}))
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        serve = status_of(home).serve
        assert serve.running and [p.pid for p in serve.processes] == [424_242]
        assert serve.processes[0].concurrency == 5
    finally:
        os.close(fd)
    assert status_of(home).serve.stale_pids == [424_242]


def test_serve_records_itself_while_it_runs(home: Home, monkeypatch: pytest.MonkeyPatch) -> None:
    """``impyard serve`` holds its record for exactly as long as it serves."""
    from impyard.serve import worker as serve_module

    seen: list[bool] = []

    def fake_serve(self: object) -> object:
        seen.append(status_of(home).serve.running)
        return serve_module.ServeStatus()

    monkeypatch.setattr(serve_module.Server, "serve", fake_serve)
    cli = Cli(home=home.root)
    result = cli("serve", "--once", "--concurrency", "2")
    assert result.code == 0, result.stderr
    assert seen == [True]
    assert status_of(home).serve.running is False
