"""Rework: a follow-up task for the imp whose run was refused, starting from that run's
files and told every reason they were refused, so the agent that wrote them fixes them.

A rework task is an ordinary queued task (``serve`` runs it and the lane validates it like
any run) that also records, in its row, the run it reworks, the first task of its chain,
its attempt number and what it starts from (``ReworkOrigin``: the preserved commit by
oid, the namespace its files were named in, the violations, the owner's note). Its
prompt is the chain's original prompt; the run's task file quotes it with the rest
(``task_text``). The owner queues one with ``candidates|quarantine rework``; policy
``review.rework_attempts`` queues one after a rejection, at most that many per
original task (``after_rejection``). ``plan_rework`` builds the task without queueing
it, so a dry run shows exactly what ``queue_rework`` would queue (and ``preview_text``
the task file its run would read).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from impyard.common import names
from impyard.common.errors import ImpyardError, NotFoundError
from impyard.common.textcap import cut, cut_at_line
from impyard.common.textsafe import escape_text, visible
from impyard.home import Home
from impyard.journal.log import Journal
from impyard.knowledge.checkouts.checkout_record import Checkout
from impyard.knowledge.checkouts.seed import (
    SeedFile,
    SeedPlan,
    plan_seed,
    rename_into,
    seed_checkout,
)
from impyard.knowledge.checkouts.treefs import parse_owner
from impyard.knowledge.imps import open_repo
from impyard.knowledge.store.refnames import candidate_ref, quarantine_ref
from impyard.queue import tasks
from impyard.queue.db import opened
from impyard.runs.records.model import Manifest, RepairRecord, ReworkOrigin, RunRequest

#: Journal event of a queued rework task.
QUEUED_EVENT = "task.rework_queued"
#: Who queued a rework the policy asked for (``by`` of its repair record).
POLICY_ACTOR = "policy review.rework_attempts"
#: Most bytes of a run's task file read back as the prompt to quote.
PROMPT_BYTES = 256 * 1024
#: Characters of one line of a task file quoting what the refused run wrote: a violation
#: (a path of up to 4,096 bytes and a message of up to ``MESSAGE_CHARS``) fits.
LINE_CHARS = 10_000
#: Characters of the violations, and of each list of files, in a task file: hundreds of
#: lines as long as they usually are (under 200 characters).
SECTION_CHARS = 128 * 1024
#: Characters of a whole task file: the quoted prompt (a foreground run's is read up to
#: ``PROMPT_BYTES``), the note and every section, each at its bound.
FILE_CHARS = 1024 * 1024
#: What a preview of the task file writes for the rework run's namespace, not yet issued.
NEW_NAMESPACE = "n_NEW"


@dataclass(frozen=True)
class ReworkPlan:
    """The rework task as it would be queued: for which imp, how, starting from what."""

    imp: str
    #: The chain's original prompt (the task's; the run's task file quotes it).
    prompt: str
    reorganize: bool
    channel: str | None
    origin: ReworkOrigin
    link: tasks.ReworkLink

    @property
    def mode(self) -> str:
        return "reorganize" if self.reorganize else "append"


def plan_rework(home: Home, m: Manifest, kind: str, *, note: str | None = None) -> ReworkPlan:
    """The rework of finished run ``m``'s preserved ``kind`` (candidate or quarantine),
    built and not queued: reads only."""
    ref = candidate_ref(m.run_id) if kind == "candidate" else quarantine_ref(m.run_id)
    repo = open_repo(home, m.imp)
    reference = repo.references.get(ref)
    if reference is None:
        raise NotFoundError(f"no {ref}: run {m.run_id} has no {kind} to rework")
    origin = ReworkOrigin(
        of=m.run_id,
        origin=m.rework_origin or m.run_id,
        kind="candidate" if kind == "candidate" else "quarantine",
        ref=ref,
        commit=str(reference.peel().id),
        namespace=m.namespace,
        reason=m.reason,
        note=note.strip() if note and note.strip() else None,
        violations=m.validation_errors,
        violations_total=m.validation_errors_total or len(m.validation_errors),
    )
    with opened(home.db) as conn:
        parent = tasks.find(conn, m.task_id) if m.task_id else None
    link = tasks.ReworkLink(
        of=m.run_id,
        root=(parent.rework_root or parent.id) if parent is not None else None,
        attempt=(parent.rework_attempt or 0) + 1 if parent is not None else 1,
        details=origin.model_dump(mode="json"),
    )
    prompt = _original_prompt(home, m, parent)
    return ReworkPlan(m.imp, prompt, m.mode == "reorganize", m.channel, origin, link)


def preview_text(home: Home, plan: ReworkPlan) -> tuple[str, SeedPlan]:
    """The task file a run of ``plan`` would read, as ``task_text`` makes it, with
    ``NEW_NAMESPACE`` where the run's namespace goes (it is issued when the run starts);
    and the files it would start with, under the names they have in the reworked run."""
    ns = plan.origin.namespace
    # Every issued namespace has one shape, so a name valid in the reworked run's is
    # valid in the new run's: seeding under the old one skips exactly what the run will.
    seeded = plan_seed(open_repo(home, plan.imp), plan.origin.commit, ns, ns)
    files = [SeedFile(rename_into(f.path, ns, NEW_NAMESPACE), f.was, f.blob) for f in seeded.files]
    shown = SeedPlan(ns, NEW_NAMESPACE, files, seeded.skipped, seeded.deleted)
    return task_text(plan.origin, plan.prompt, NEW_NAMESPACE, shown), seeded


def queue_rework(
    home: Home,
    m: Manifest,
    kind: str,
    *,
    note: str | None = None,
    by: str,
) -> tasks.Task:
    """Queue a rework of finished run ``m``'s preserved ``kind`` (``plan_rework``),
    record it in ``m``'s repairs and the journal; the caller owns ``m`` and saves it."""
    plan = plan_rework(home, m, kind, note=note)
    with opened(home.db) as conn:
        task = tasks.add(
            conn,
            plan.imp,
            plan.prompt,
            reorganize=plan.reorganize,
            channel=plan.channel,
            rework=plan.link,
        )
    origin = plan.origin
    m.repairs.append(
        RepairRecord(
            action="rework",
            kind=origin.kind,
            by=by,
            at=names.utc_now(),
            outcome="queued",
            ref=origin.ref,
            commit=origin.commit,
            detail=task.id,
        )
    )
    Journal(home.journal).record(
        QUEUED_EVENT,
        run=m.run_id,
        imp=m.imp,
        original=origin.origin,
        task=task.id,
        root_task=task.rework_root,
        attempt=task.rework_attempt,
        by=by,
    )
    return task


def after_rejection(home: Home, m: Manifest, attempts: int) -> tasks.Task | None:
    """The rework the policy asks for after run ``m`` was rejected: only for a run from a
    task whose chain holds fewer than ``attempts`` reworks, and once per run."""
    if attempts <= 0 or m.task_id is None or m.candidate_ref is None:
        return None
    if any(v.rule == "checkpoint-disabled" for v in m.validation_errors):
        return None  # refused by policy, not for anything the agent could fix
    with opened(home.db) as conn:
        task = tasks.find(conn, m.task_id)
        if task is None or (task.rework_attempt or 0) >= attempts:
            return None
        if tasks.reworks_of(conn, m.run_id):
            return None  # queued already (the run's ending was resumed after a crash)
    return queue_rework(home, m, "candidate", by=POLICY_ACTOR)


def origin_of(task: tasks.Task) -> ReworkOrigin | None:
    """What a rework task starts from (None for any other task)."""
    return ReworkOrigin.model_validate(task.rework) if task.rework else None


def seed_plan(home: Home, m: Manifest, request: RunRequest) -> SeedPlan | None:
    """The files a rework run's checkout starts with (None: no rework, or no checkout)."""
    origin = request.rework
    if origin is None:
        return None
    try:
        return plan_seed(open_repo(home, m.imp), origin.commit, origin.namespace, m.namespace)
    except ImpyardError as exc:
        raise ImpyardError(
            f"cannot read the files of run {origin.of} to rework ({origin.ref} at "
            f"{origin.commit}): {exc}"
        ) from exc


def seed(home: Home, imp: str, checkout: Checkout, plan: SeedPlan | None, user: str) -> None:
    """Write a rework run's files into its new checkout (nothing for another run)."""
    if plan is not None:
        seed_checkout(open_repo(home, imp), checkout, plan, parse_owner(user))


def task_text(origin: ReworkOrigin, prompt: str, namespace: str, plan: SeedPlan | None) -> str:
    """The rework run's task file: what a rework is, the original prompt, every violation
    (under the names the files have now), the owner's note and what was seeded.

    What the refused run wrote (paths, and violations quoting its files) is bounded: each
    line to ``LINE_CHARS``, the violations and the file lists each to ``SECTION_CHARS``
    (so the owner's note after them stays), the whole file to ``FILE_CHARS``; each cut
    says how many characters it cut."""

    def now(text: str) -> str:  # a name or message as it reads in this run's namespace
        return text.replace(origin.namespace, namespace)

    def quoted(text: str) -> str:  # one line of what the box wrote, escaped and bounded
        return cut(visible(text), LINE_CHARS)

    lines = [
        f"# Rework of run {origin.of}",
        "",
        f"This is a rework task. Run {origin.of} did this task, and {_fate(origin)} "
        f"({origin.kind} {origin.ref}). Your knowledge checkout already holds the files it "
        f"wrote, renamed into your namespace {namespace} where a record name requires it. "
        "Fix every violation listed below (rename, edit or delete the files), run "
        "`impyard-check` until it says ok, then finish. Do not start the task over.",
        "",
        "## The original task",
        "",
        *[f"> {line}" if line else ">" for line in escape_text(prompt).splitlines()],
        "",
        f"## Violations ({origin.violations_total})",
        "",
    ]
    found: list[str] = []
    if origin.reason:
        found.append(quoted(f"- why the run was refused: {now(origin.reason)}"))
    for v in origin.violations:
        found.append(quoted(f"- {now(v.path) or '-'}: {v.rule}: {now(v.message)}"))
    if origin.violations_total > len(origin.violations):
        more = origin.violations_total - len(origin.violations)
        found.append(f"- … {more} more (`impyard-check` lists them all)")
    lines.extend(_section(found))
    if origin.note:
        lines += ["", "## The owner's note", ""]
        lines += [f"> {line}" if line else ">" for line in escape_text(origin.note).splitlines()]
    if plan is not None:
        lines += ["", f"## Files from run {origin.of} in your checkout ({len(plan.files)})", ""]
        listed: list[str] = []
        for f in plan.files:
            renamed = f" (was {f.was})" if f.was != f.path else ""
            listed.append(quoted(f"- {f.path}{renamed}"))
        lines.extend(_section(listed))
        if plan.skipped:
            lines += ["", f"## Not in your checkout ({len(plan.skipped)})", ""]
            lines.extend(_section([quoted(f"- {path}: {why}") for path, why in plan.skipped]))
        if plan.deleted:
            lines += ["", "## Deleted by that run (not repeated here)", ""]
            lines.extend(_section([quoted(f"- {path}") for path in plan.deleted]))
    return cut_at_line("\n".join(lines) + "\n", FILE_CHARS)


def _section(lines: list[str]) -> list[str]:
    """Lines of what the box wrote, at most ``SECTION_CHARS`` of them in all."""
    if not lines:
        return []
    return [cut_at_line("\n".join(lines) + "\n", SECTION_CHARS).removesuffix("\n")]


def _fate(origin: ReworkOrigin) -> str:
    if origin.kind == "candidate":
        return "its work was refused"
    return "its box did not finish cleanly, so its work was kept off main"


def _original_prompt(home: Home, m: Manifest, parent: tasks.Task | None) -> str:
    """The chain's original prompt: the task's (a rework task keeps its chain's), else
    what the run's task file says (a foreground run)."""
    if parent is not None:
        return parent.prompt
    path = home.run_task(m.run_id)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise ImpyardError(f"cannot read the task of run {m.run_id} ({exc.strerror})") from exc
    try:
        data = os.read(fd, PROMPT_BYTES)
    finally:
        os.close(fd)
    return data.decode("utf-8", "replace").rstrip("\n")
