"""The console's overview, run page and /metrics over HTTP: what a logged-in owner sees
of runs written as the pipeline writes them, box output escaped, and metrics that parse
with Prometheus' own text parser and move as runs land."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from impyard.home import Home
from impyard.knowledge.change import KnowledgeLimits, Violation
from impyard.runs.records import manifest as manifests
from tests.helpers.cli import Cli
from tests.helpers.runs import write_run
from tests.helpers.web import console_for, finished_run, log_in

RUN_A = "run-20260711T120000Z-aaaaaaaaaa"
RUN_B = "run-20260711T120100Z-bbbbbbbbbb"
RUN_C = "run-20260711T120200Z-cccccccccc"
HOSTILE_OUTPUT = b"hello <script>window.__pwned=1</script>\x1b[2J\x1b]0;title\x07 done\xff\n"


@pytest.fixture
def home(cli: Cli) -> Cli:
    assert cli("init").code == 0
    assert cli("imp", "create", "yuko").code == 0
    return cli


def _runs_total(text: str) -> dict[tuple[str, str], float]:
    found: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(text):
        if family.name == "impyard_runs":
            for sample in family.samples:
                if sample.name == "impyard_runs_total":
                    found[(sample.labels["imp"], sample.labels["outcome"])] = sample.value
    return found


def test_metrics_parse_and_count_runs_as_they_land(home: Cli) -> None:
    console, client = console_for(home.home)
    log_in(console, client)
    assert _runs_total(client.get("/metrics").text) == {}
    finished_run(home.home, RUN_A)
    finished_run(home.home, RUN_B, "rejected")
    first = client.get("/metrics")
    assert first.headers["content-type"].startswith("text/plain")
    assert _runs_total(first.text) == {("yuko", "integrated"): 1, ("yuko", "rejected"): 1}
    finished_run(home.home, RUN_C)
    families = {f.name: f for f in text_string_to_metric_families(client.get("/metrics").text)}
    assert _runs_total(client.get("/metrics").text)[("yuko", "integrated")] == 2
    durations = {s.name: s.value for s in families["impyard_run_duration_seconds"].samples}
    assert durations["impyard_run_duration_seconds_count"] == 3
    assert durations["impyard_run_duration_seconds_sum"] == 90
    phases = families["impyard_run_phase_seconds"].samples
    box = [s for s in phases if s.labels.get("phase") == "box" and s.name.endswith("_count")]
    assert box[0].value == 3
    assert "impyard_queue_tasks" in families and "impyard_data_root_free_bytes" in families
    for family in families.values():
        for sample in family.samples:
            assert not any(value.startswith("run-") for value in sample.labels.values())


def test_metrics_need_a_session_unless_public(home: Cli) -> None:
    _, closed = console_for(home.home)
    assert closed.get("/metrics").status_code == 401
    _, public = console_for(home.home, metrics_public=True)
    scraped = public.get("/metrics")
    assert scraped.status_code == 200
    assert list(text_string_to_metric_families(scraped.text))
    assert public.get("/").status_code == 401, "only /metrics is public"


def test_metrics_count_gateway_requests_from_the_journal(home: Cli) -> None:
    from impyard.journal.log import Journal

    journal = Journal(Home(home.home).journal)
    for decision, rule in (("allow", None), ("deny", "gateway.budget.requests_per_run")):
        journal.record(
            "gateway.request",
            run=RUN_A,
            imp="yuko",
            route="docs",
            rule=rule,
            decision=decision,
            bytes=100,
            request_bytes=10,
            host="example.com",
            path="/x",
        )
    _, client = console_for(home.home, metrics_public=True)
    text = client.get("/metrics").text
    journal.record(
        "gateway.request",
        run=RUN_A,
        imp="yuko",
        route="docs",
        rule=None,
        decision="allow",
        bytes=5,
        request_bytes=0,
    )
    families = {f.name: f for f in text_string_to_metric_families(client.get("/metrics").text)}
    requests = {
        (s.labels["route"], s.labels["rule"], s.labels["decision"]): s.value
        for s in families["impyard_gateway_requests"].samples
    }
    assert requests == {
        ("docs", "none", "allow"): 2,
        ("docs", "gateway.budget.requests_per_run", "deny"): 1,
    }
    refusals = families["impyard_gateway_budget_refusals"].samples
    assert refusals[0].value == 1
    assert "example.com" not in text and "/x" not in text


def test_the_overview_lists_outcomes_and_unfinished_runs(home: Cli) -> None:
    console, client = console_for(home.home)
    log_in(console, client)
    finished_run(home.home, RUN_A, reason=None)
    finished_run(home.home, RUN_B, "quarantined", reason="box <b>exited</b> 137")
    write_run(Home(home.home), RUN_C, state="running", started_at="2026-07-11T12:02:00Z")
    page = client.get("/").text
    assert f'href="/runs/{RUN_A}"' in page and "integrated" in page
    assert "box &lt;b&gt;exited&lt;/b&gt; 137" in page
    running = page.split("Running")[1].split("Last outcomes")[0]
    assert RUN_C in running and 'data-since="2026-07-11T12:02:00Z"' in running
    assert "engine" in page and "policy" in page and "disk" in page


def test_the_overview_row_of_a_rejected_run_shows_its_first_reason(home: Cli) -> None:
    console, client = console_for(home.home)
    log_in(console, client)
    refused = [
        Violation("records/a<b>--n_7f3c91a2d0e4_1.md", "file-too-large", "too long"),
        Violation("records/c--n_7f3c91a2d0e4_2.md", "bad-frontmatter", "no id"),
    ]
    finished_run(home.home, RUN_A, "rejected", validation_errors=refused)
    page = client.get("/").text
    [row] = [line for line in page.split("<tr") if RUN_A in line]
    reason = "records/a&lt;b&gt;--n_7f3c91a2d0e4_1.md: file-too-large (…and 1 more)"
    assert f'data-label="reason">{reason}</td>' in row


def test_the_run_page_shows_box_output_as_text(home: Cli) -> None:
    console, client = console_for(home.home)
    log_in(console, client)
    finished_run(home.home, RUN_A, reason="exit <img src=x onerror=alert(1)>")
    Home(home.home).box_log(RUN_A).write_bytes(HOSTILE_OUTPUT)
    page = client.get(f"/runs/{RUN_A}").text
    assert "<script>window" not in page and "<img src=x" not in page
    assert "hello &lt;script&gt;window.__pwned=1&lt;/script&gt;" in page
    assert "\x1b" not in page and "\x07" not in page
    assert "\\x1b[2J" in page and "\\xff" in page
    assert "exit &lt;img src=x onerror=alert(1)&gt;" in page


def test_the_output_stream_sends_escaped_box_output_then_the_outcome(home: Cli) -> None:
    console, client = console_for(home.home)
    log_in(console, client)
    finished_run(home.home, RUN_A)
    Home(home.home).box_log(RUN_A).write_bytes(HOSTILE_OUTPUT)
    with client.stream("GET", f"/runs/{RUN_A}/output") as answer:
        assert answer.headers["content-type"].startswith("text/event-stream")
        body = "".join(answer.iter_text())
    assert "event: output\ndata: hello <script>window.__pwned=1</script>\\x1b[2J" in body
    assert "\x1b" not in body
    assert body.rstrip().endswith("event: end\ndata: finished: integrated")


def test_a_running_run_page_shows_its_limits_and_follows_its_output(home: Cli) -> None:
    console, client = console_for(home.home)
    log_in(console, client)
    write_run(
        Home(home.home),
        RUN_C,
        state="running",
        started_at="2026-07-11T12:02:00Z",
        limits=KnowledgeLimits(max_file_chars=1234),
    )
    answer = client.get(f"/runs/{RUN_C}")
    assert answer.status_code == 200
    assert "max_file_chars=1234 " in answer.text
    assert f'data-follow="/runs/{RUN_C}/output"' in answer.text


def test_a_missing_run_is_a_404_page(home: Cli) -> None:
    console, client = console_for(home.home)
    log_in(console, client)
    assert client.get("/runs/run-20260101T000000Z-0000000000").status_code == 404
    assert client.get("/runs/..%2Fetc").status_code == 404
    assert manifests.read_or_none(Home(home.home), RUN_A) is None


def test_an_unexpected_error_still_carries_the_security_headers(home: Cli) -> None:
    from starlette.testclient import TestClient

    from impyard.web.serving.app import build_app

    console, _ = console_for(home.home)
    client = TestClient(build_app(console), raise_server_exceptions=False)
    log_in(console, client)
    Home(home.home).run_dir(RUN_A).mkdir(parents=True)
    Home(home.home).manifest(RUN_A).write_text("{ not json")
    broken = client.get(f"/runs/{RUN_A}")
    assert broken.status_code == 500
    assert "default-src 'none'" in broken.headers["content-security-policy"]
    assert broken.headers["x-content-type-options"] == "nosniff"
