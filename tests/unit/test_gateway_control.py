"""The gateway's control API on a host-loopback listener (no Docker): routing, methods,
formats, refusals, the per-run rate limit and the journal. The run behind it is a
recording double here; the real run answers in the Docker tests."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from impyard.gateway import Gateway
from impyard.gateway.proxy.control import ControlRefused, RunControl, render_text
from impyard.journal.log import Journal
from impyard.policy.models import GatewayPolicy
from tests.helpers.gateway import gateway_home, loopback_listener

RUN_ID = "run-20260711T120000Z-0123456789"
VIOLATION = {"path": "records/a/b.md", "rule": "frontmatter", "message": "no id"}


@dataclass
class Answers:
    """The run side: fixed answers, and how often it was asked."""

    check_answer: dict[str, Any] = field(
        default_factory=lambda: {
            "ok": False,
            "violations": [VIOLATION],
            "records": 2,
            "organization_files": 0,
        }
    )
    refuse: ControlRefused | None = None
    asked: list[str] = field(default_factory=list)

    def check(self) -> Mapping[str, Any]:
        self.asked.append("check")
        if self.refuse is not None:
            raise self.refuse
        return self.check_answer

    def report(self, agent_steps: int) -> Mapping[str, Any]:
        self.asked.append(f"report {agent_steps}")
        return {"agent_steps": agent_steps}

    def file_task(self, body: bytes) -> Mapping[str, Any]:
        self.asked.append(f"task {body.decode()}")
        if "Bea" in body.decode():
            return {"task": None, "reasons": ["names a conversation participant", "too long"]}
        return {"task": "task-0123456789ab", "reasons": []}

    def checkpoint(self) -> Mapping[str, Any]:
        self.asked.append("checkpoint")
        return {
            "checkpoint": 2,
            "outcome": "integrated",
            "commit": "c" * 40,
            "files": ["records/a/b.md"],
            "violations": [],
        }


@dataclass
class Served:
    gateway: Gateway
    port: int
    journal: Journal
    answers: Answers


def serve(tmp_path: Path, control: RunControl | None, per_minute: int = 60) -> Served:
    listener, port = loopback_listener(16)
    home, journal = gateway_home(tmp_path)
    policy = GatewayPolicy.model_validate(
        {"port": port, "budget": {"control_requests_per_minute": per_minute}}
    )
    gateway = Gateway.start(
        policy, home=home, imp="yuko", run_id=RUN_ID, journal=journal, control=control
    )
    gateway.serve(listener)
    answers = control if isinstance(control, Answers) else Answers()
    return Served(gateway, port, journal, answers)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    s = serve(tmp_path, Answers())
    yield s
    s.gateway.close()


def ask(
    port: int, method: str, target: str, body: bytes | None = None, **headers: str
) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(method, target, body=body, headers=headers)
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        conn.close()


def test_check_answers_json_and_is_journaled(served: Served) -> None:
    status, headers, body = ask(served.port, "GET", "/impyard/check")
    assert status == 200 and headers["Content-Type"] == "application/json"
    assert json.loads(body)["violations"] == [VIOLATION]
    served.gateway.close()
    (entry,) = served.journal.read(event="gateway.request")
    assert (entry["route"], entry["rule"], entry["decision"]) == (
        "impyard",
        "impyard.control",
        "allowed",
    )
    assert entry["path"] == "/impyard/check" and entry["status"] == 200
    assert entry["run"] == RUN_ID and entry["bytes"] == len(body)


def test_the_absolute_form_through_the_proxy_reaches_the_same_endpoint(served: Served) -> None:
    """busybox wget without -Y off sends http://127.0.0.1:<port>/impyard/... as a proxy."""
    status, _, body = ask(served.port, "POST", f"http://127.0.0.1:{served.port}/impyard/checkpoint")
    assert status == 200 and json.loads(body)["checkpoint"] == 2
    assert served.answers.asked == ["checkpoint"]


def test_text_format_is_status_violations_summary(served: Served) -> None:
    status, _, body = ask(served.port, "GET", "/impyard/check?format=text")
    lines = body.decode().splitlines()
    assert status == 200 and lines[0] == "fail"
    assert lines[1] == "records/a/b.md: frontmatter: no id"
    assert lines[2].startswith("impyard-check: 1 violation(s) (2 record(s)")
    _, headers, _ = ask(served.port, "GET", "/impyard/check", Accept="text/plain")
    assert headers["Content-Type"].startswith("text/plain")


def test_checkpoint_text_names_the_checkpoint_and_commit() -> None:
    answer = {"checkpoint": 3, "outcome": "integrated", "commit": "abc", "files": ["x", "y"]}
    assert render_text("checkpoint", answer).splitlines() == [
        "ok",
        "impyard-checkpoint: checkpoint 3 landed as abc (2 file(s))",
    ]
    refused = {"checkpoint": None, "outcome": "rejected", "violations": [VIOLATION]}
    assert render_text("checkpoint", refused).splitlines() == [
        "fail",
        "records/a/b.md: frontmatter: no id",
        "impyard-checkpoint: nothing landed (rejected); 1 violation(s)",
    ]


def test_what_the_box_sends_names_nothing(served: Served) -> None:
    """Query, headers and body claiming another run change nothing: the run behind the
    listener answers, and the body is read and dropped."""
    claim = json.dumps({"run": "run-20990101T000000Z-ffffffffff", "imp": "other"}).encode()
    status, _, body = ask(
        served.port,
        "POST",
        "/impyard/checkpoint?run=run-20990101T000000Z-ffffffffff&imp=other",
        body=claim,
        **{"X-Impyard-Run": "run-20990101T000000Z-ffffffffff", "Content-Type": "application/json"},
    )
    assert status == 200 and json.loads(body)["checkpoint"] == 2
    assert served.answers.asked == ["checkpoint"]


def test_unknown_paths_and_wrong_methods_are_refused_in_one_line(served: Served) -> None:
    status, headers, body = ask(served.port, "GET", "/impyard/push")
    assert status == 404 and headers["X-Impyard-Gateway-Rule"] == "impyard.control"
    assert body.decode().count("\n") == 1
    assert "GET /impyard/check" in body.decode() and "POST /impyard/checkpoint" in body.decode()
    status, _, body = ask(served.port, "POST", "/impyard/check")
    assert status == 405 and b"answers GET only" in body
    status, _, body = ask(served.port, "GET", "/impyard/checkpoint")
    assert status == 405 and b"answers POST only" in body
    assert served.answers.asked == []


def test_a_large_body_is_refused_unread(served: Served) -> None:
    status, _, _ = ask(served.port, "POST", "/impyard/checkpoint", body=b"x" * 70000)
    assert status == 413 and served.answers.asked == []


def test_a_busy_run_answers_409_with_the_reason(tmp_path: Path) -> None:
    answers = Answers(refuse=ControlRefused(409, "a checkpoint of this run is in progress"))
    s = serve(tmp_path, answers)
    try:
        status, _, body = ask(s.port, "GET", "/impyard/check")
    finally:
        s.gateway.close()
    assert status == 409 and b"a checkpoint of this run is in progress" in body


def test_a_run_without_knowledge_has_nothing_to_check(tmp_path: Path) -> None:
    s = serve(tmp_path, None)
    try:
        status, _, body = ask(s.port, "GET", "/impyard/check")
    finally:
        s.gateway.close()
    assert status == 409 and b"knowledge is disabled" in body


def test_control_requests_are_rate_limited_per_run(tmp_path: Path) -> None:
    s = serve(tmp_path, Answers(), per_minute=2)
    try:
        codes = [ask(s.port, "GET", "/impyard/check")[0] for _ in range(3)]
        status, _, body = ask(s.port, "POST", "/impyard/checkpoint")
    finally:
        s.gateway.close()
    assert codes == [200, 200, 429]
    assert status == 429 and b"over 2 control requests a minute" in body
    assert s.answers.asked == ["check", "check"]


def test_a_report_records_the_step_count_in_json_or_text(served: Served) -> None:
    status, headers, body = ask(served.port, "POST", "/impyard/report", b'{"agent_steps": 3}')
    assert status == 200 and headers["Content-Type"] == "application/json"
    assert json.loads(body) == {"agent_steps": 3}
    status, _, body = ask(
        served.port, "POST", "/impyard/report?format=text", iter([b'{"agent_', b'steps":0}'])
    )  # chunked
    assert status == 200
    assert body.decode() == "ok\nimpyard-report: recorded 0 agent step(s)\n"
    assert served.answers.asked == ["report 3", "report 0"]


@pytest.mark.parametrize(
    ("body", "reasons"),
    [
        (b"three", ['a report is a JSON object {"agent_steps": N}']),
        (b"[3]", ['a report is a JSON object {"agent_steps": N}']),
        (b"{}", ["agent_steps is missing"]),
        (b'{"agent_steps": true}', ["agent_steps is not a whole number"]),
        (b'{"agent_steps": 2.5}', ["agent_steps is not a whole number"]),
        (b'{"agent_steps": -1}', ["agent_steps is outside 0..1000000"]),
        (b'{"agent_steps": 1000001}', ["agent_steps is outside 0..1000000"]),
        (
            b'{"run": "run-x", "agent_steps": "9", "imp": "other"}',
            ["unknown field 'imp'", "unknown field 'run'", "agent_steps is not a whole number"],
        ),
    ],
)
def test_a_report_that_is_not_one_small_count_is_refused_with_every_reason(
    served: Served, body: bytes, reasons: list[str]
) -> None:
    status, headers, answer = ask(served.port, "POST", "/impyard/report", body)
    assert status == 400 and headers["X-Impyard-Gateway-Rule"] == "impyard.control"
    line = answer.decode()
    assert line.count("\n") == 1
    for reason in reasons:
        assert reason in line
    assert served.answers.asked == []


def test_a_large_report_is_refused_unread_and_a_report_is_posted(served: Served) -> None:
    padded = b'{"agent_steps": 3' + b" " * 1024 + b"}"
    status, _, body = ask(served.port, "POST", "/impyard/report", padded)
    assert status == 413 and b"at most 1024 bytes" in body
    status, _, body = ask(served.port, "GET", "/impyard/report")
    assert status == 405 and b"answers POST only" in body
    assert served.answers.asked == []


def test_a_filed_task_is_its_prompt_as_the_body_and_its_answer_says_ok_or_every_reason(
    served: Served,
) -> None:
    status, _, body = ask(served.port, "POST", "/impyard/task?format=text", "Résumé SSO".encode())
    assert status == 200
    assert body.decode() == "ok\nimpyard-task: filed task-0123456789ab (it runs clean)\n"
    status, _, body = ask(served.port, "POST", "/impyard/task", b"ask Bea")
    assert status == 200 and json.loads(body)["task"] is None
    status, _, body = ask(served.port, "POST", "/impyard/task?format=text", b"ask Bea")
    assert body.decode() == (
        "fail\nnames a conversation participant\ntoo long\nimpyard-task: nothing filed\n"
    )
    assert served.answers.asked == ["task Résumé SSO", "task ask Bea", "task ask Bea"]


def test_a_task_prompt_past_four_thousand_characters_of_utf8_is_refused_unread(
    served: Served,
) -> None:
    status, _, body = ask(served.port, "POST", "/impyard/task", "é".encode() * 8001)
    assert status == 413 and b"at most 4000 characters" in body
    assert served.answers.asked == []
