"""The bridge out of a tainted run: ``impyard-task`` files a task, which runs clean.

A run that carries conversation content writes no knowledge (the clean room), yet it may
find something worth keeping. Its way out is a task for the same imp, filed over its
control endpoint: one bounded prompt, journaled, scanned against the participants of the
conversation that reached the run (``memory.participants``). The task carries no
channel, so its run is clean and writes a checkout of its own. The prompt is the whole
residual leak surface; a paraphrase of the conversation passes the scan, and the docs
say so.
"""

from __future__ import annotations

from dataclasses import dataclass

from impyard.gateway.proxy.control import MAX_TASK_PROMPT_CHARS as MAX_PROMPT_CHARS
from impyard.home import Home
from impyard.memory.participants import NAMES_A_PARTICIPANT, channel_participants
from impyard.queue import tasks
from impyard.queue.db import opened, transaction
from impyard.runs.provision.taint import taint_channel
from impyard.runs.records.model import Manifest

#: The most tasks one run may file.
MAX_TASKS_PER_RUN = 3


@dataclass(frozen=True)
class Filed:
    """A task the run filed, or every reason it was not (``task_id`` None)."""

    task_id: str | None
    reasons: tuple[str, ...] = ()
    #: What kind of name a refused prompt held (``user id``, ``email address``, ...).
    named: tuple[str, ...] = ()
    #: The prompt filed (what the journal records).
    prompt: str = ""


def prompt_problems(body: bytes) -> tuple[str | None, list[str]]:
    """The prompt a request body holds, and every reason it cannot be filed."""
    try:
        prompt = body.decode("utf-8")
    except UnicodeDecodeError:
        return None, ["the prompt is not UTF-8 text"]
    reasons = []
    if not prompt.strip():
        reasons.append("the prompt is empty")
    if len(prompt) > MAX_PROMPT_CHARS:
        reasons.append(
            f"the prompt is {len(prompt)} characters; at most {MAX_PROMPT_CHARS} may be filed"
        )
    if any((ord(c) < 32 and c not in "\n\t") or ord(c) == 127 for c in prompt):
        reasons.append("the prompt holds control characters")
    return prompt, reasons


def file_task(home: Home, m: Manifest, body: bytes) -> Filed:
    """File the task a request body asks for, from tainted run ``m``; or every reason
    not. The count of the run's tasks is read and the task added in one transaction."""
    prompt, reasons = prompt_problems(body)
    if not m.tainted:
        reasons.insert(
            0,
            "this run carries no conversation content: it writes its knowledge itself "
            "(impyard-task is the way out of a tainted run)",
        )
    named: list[str] = []
    if prompt is not None and m.tainted:
        found = channel_participants(home, m.imp, taint_channel(home, m)).named_in(prompt)
        named = sorted({p.kind for p in found})
        if found:
            reasons.append(f"{NAMES_A_PARTICIPANT} ({', '.join(named)})")
    with opened(home.db) as conn, transaction(conn):
        if len(tasks.filed_by(conn, m.run_id)) >= MAX_TASKS_PER_RUN:
            reasons.append(f"this run filed {MAX_TASKS_PER_RUN} tasks already, the most")
        if reasons or prompt is None:
            return Filed(None, tuple(reasons), tuple(named))
        task = tasks.add_in(conn, m.imp, prompt, filed_by=m.run_id)
    return Filed(task.id, prompt=task.prompt)
