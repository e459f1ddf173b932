"""The control API a box reaches on its own gateway: ``GET /impyard/check``,
``POST /impyard/checkpoint``, ``POST /impyard/report`` and ``POST /impyard/task``.

The gateway belongs to one run, so the run is known from the host side of the
listener; a box can only ask about itself. Nothing it sends (query, headers,
body) names a run, imp, base or namespace: all of it is ignored, and a body is
read and dropped, except a report's, which is one small JSON object with one
field (``{"agent_steps": N}``, the agent's step count the run records), and a task's,
which is the prompt of the task a tainted run files (UTF-8 text,
``runs.checkpoints.bridge``). Requests are rate-limited per run and journaled like every
other gateway request. Answers are JSON, or text (``?format=text`` or
``Accept: text/plain``) for the box tools: a first line ``ok`` or ``fail``, then one line
per violation, then a summary line.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import parse_qs

from impyard.gateway.guard.outcome import Record, Refused
from impyard.gateway.proxy.framing import content_length, is_chunked, read_chunked, read_exact

if TYPE_CHECKING:
    from impyard.gateway.proxy.client import Client

PREFIX = "/impyard/"
RULE = "impyard.control"
#: Endpoint -> the one method it answers.
ENDPOINTS = {"check": "GET", "checkpoint": "POST", "report": "POST", "task": "POST"}
# A control request carries no meaningful body; more than this is refused unread.
_MAX_BODY = 65536
# A report is one small JSON object; a larger body is refused unread.
MAX_REPORT_BODY = 1024
#: The most steps a report may claim (a count, not a measure: anything larger is a lie).
MAX_AGENT_STEPS = 1_000_000
#: The longest prompt a run may file as a task, in characters (one paragraph), and the
#: most bytes its body may take (4 per character in UTF-8): a larger one is refused unread.
MAX_TASK_PROMPT_CHARS = 4000
MAX_TASK_BODY = 4 * MAX_TASK_PROMPT_CHARS


class ControlRefused(Exception):
    """The run cannot answer now (busy, ending, knowledge disabled): a status and one line."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class RunControl(Protocol):
    """What the run behind a gateway answers; implemented by
    ``impyard.runs.checkpoints.control``."""

    def check(self) -> Mapping[str, Any]: ...

    def checkpoint(self) -> Mapping[str, Any]: ...

    def report(self, agent_steps: int) -> Mapping[str, Any]: ...

    def file_task(self, body: bytes) -> Mapping[str, Any]: ...


class ControlRate:
    """At most ``per_minute`` control requests in any 60 seconds, per run."""

    def __init__(self, per_minute: int) -> None:
        self.per_minute = per_minute
        self._times: deque[float] = deque()
        self._lock = threading.Lock()

    def admit(self) -> bool:
        now = time.monotonic()
        with self._lock:
            while self._times and now - self._times[0] >= 60:
                self._times.popleft()
            if len(self._times) >= self.per_minute:
                return False
            self._times.append(now)
            return True


def is_control(host: str, port: int, gateway_port: int, path: str) -> bool:
    """A request to the gateway itself (origin-form, or absolute to its loopback address)."""
    return host in ("127.0.0.1", "localhost") and port == gateway_port and path.startswith(PREFIX)


def serve_control(
    handler: Client,
    rec: Record,
    path: str,
    query: str,
    control: RunControl | None,
    rate: ControlRate,
) -> None:
    """Answer one control request, or raise ``Refused`` with the reason."""
    rec.route, rec.rule = "impyard", RULE
    name = path[len(PREFIX) :]
    body = _read_body(handler, _BODY_KEPT.get(name, 0))
    method = ENDPOINTS.get(name)
    if method is None:
        known = ", ".join(f"{m} {PREFIX}{n}" for n, m in ENDPOINTS.items())
        raise Refused(404, RULE, f"no control endpoint {path[:80]!r} (there is {known})")
    if rec.method != method:
        raise Refused(405, RULE, f"{PREFIX}{name} answers {method} only")
    if control is None:
        raise Refused(409, RULE, "this run has no checkout to check (knowledge is disabled)")
    if not rate.admit():
        raise Refused(429, RULE, f"over {rate.per_minute} control requests a minute for this run")
    try:
        if name == "report":
            answer = control.report(parse_report(body))
        elif name == "task":
            answer = control.file_task(body)
        elif name == "check":
            answer = control.check()
        else:
            answer = control.checkpoint()
    except ControlRefused as exc:
        raise Refused(exc.status, RULE, exc.reason) from exc
    rec.decision = "allowed"
    wants_text = "text" in parse_qs(query).get("format", []) or "text/plain" in (
        handler.headers.get("Accept") or ""
    )
    if wants_text:
        body, kind = render_text(name, answer).encode(), "text/plain; charset=utf-8"
    else:
        body, kind = (json.dumps(answer) + "\n").encode(), "application/json"
    handler.send_response_only(200)
    handler.send_header("Content-Type", kind)
    handler.send_header("Content-Length", str(len(body)))
    handler.send_header("Cache-Control", "no-store")
    handler.end_headers()
    handler.wfile.write(body)
    handler.responded = True
    rec.status, rec.bytes = 200, len(body)


def render_text(name: str, answer: Mapping[str, Any]) -> str:
    """The box tools' format: ``ok``/``fail``, one line per violation, a summary."""
    violations = answer.get("violations") or []
    lines = [f"{v['path']}: {v['rule']}: {v['message']}".replace("\n", " ") for v in violations]
    if name == "report":
        return f"ok\nimpyard-report: recorded {answer.get('agent_steps')} agent step(s)\n"
    if name == "task":
        if answer.get("task"):
            return f"ok\nimpyard-task: filed {answer['task']} (it runs clean)\n"
        reasons = [str(r).replace("\n", " ") for r in answer.get("reasons") or []]
        return "\n".join(["fail", *reasons, "impyard-task: nothing filed"]) + "\n"
    if name == "check":
        ok = bool(answer.get("ok"))
        summary = (
            f"impyard-check: {len(violations)} violation(s)" if violations else "impyard-check: ok"
        )
        summary += (
            f" ({answer.get('records', 0)} record(s), "
            f"{answer.get('organization_files', 0)} organization file(s) in this run's change)"
        )
    else:
        number, outcome = answer.get("checkpoint"), answer.get("outcome")
        ok = not violations and outcome in ("integrated", "empty")
        if outcome == "integrated":
            summary = (
                f"impyard-checkpoint: checkpoint {number} landed as {answer.get('commit')} "
                f"({len(answer.get('files') or [])} file(s))"
            )
        elif outcome == "empty":
            summary = "impyard-checkpoint: nothing new to checkpoint"
        else:
            summary = f"impyard-checkpoint: nothing landed ({outcome})"
        if violations:
            summary += f"; {len(violations)} violation(s)"
    return "\n".join(["ok" if ok else "fail", *lines, summary]) + "\n"


def parse_report(body: bytes) -> int:
    """The step count of a report body ``{"agent_steps": N}``; anything else is refused
    with every reason."""
    try:
        doc = json.loads(body)
    except ValueError:
        raise Refused(400, RULE, 'a report is a JSON object {"agent_steps": N}') from None
    if not isinstance(doc, dict):
        raise Refused(400, RULE, 'a report is a JSON object {"agent_steps": N}')
    reasons = [f"unknown field {key[:40]!r}" for key in sorted(doc) if key != "agent_steps"]
    steps = doc.get("agent_steps")
    if "agent_steps" not in doc:
        reasons.append("agent_steps is missing")
    elif not isinstance(steps, int) or isinstance(steps, bool):
        reasons.append("agent_steps is not a whole number")
    elif not 0 <= steps <= MAX_AGENT_STEPS:
        reasons.append(f"agent_steps is outside 0..{MAX_AGENT_STEPS}")
    if reasons:
        raise Refused(400, RULE, "report refused: " + "; ".join(reasons))
    assert isinstance(steps, int)
    return steps


def _read_body(handler: Client, keep: int) -> bytes:
    """Read a request body, so the connection stays in step, and return at most ``keep``
    bytes of it (a larger one is 413); never trust it. Without ``keep`` it is dropped."""
    limit = keep or _MAX_BODY
    kept: list[bytes] = []
    seen = 0
    if is_chunked(handler.headers):
        pieces = read_chunked(handler.rfile)
    else:
        length = content_length(handler.headers) or 0
        if length > limit:
            raise Refused(413, RULE, _too_large(keep))
        pieces = read_exact(handler.rfile, length)
    for piece in pieces:
        seen += len(piece)
        if seen > limit:
            raise Refused(413, RULE, _too_large(keep))
        if keep:
            kept.append(piece)
    return b"".join(kept)


#: The endpoints whose body is read and kept, and its most bytes.
_BODY_KEPT = {"report": MAX_REPORT_BODY, "task": MAX_TASK_BODY}


def _too_large(keep: int) -> str:
    if keep == MAX_TASK_BODY:
        return f"a task's prompt is at most {MAX_TASK_PROMPT_CHARS} characters"
    if keep:
        return f"a report is a JSON object of at most {keep} bytes"
    return "a control request has no body to speak of"
