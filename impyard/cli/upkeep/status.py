"""``impyard status [--json]``: the one screen an owner reads first."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

import typer

from impyard.cli.shared._common import echo, initialized_home, print_json, state
from impyard.status.units import age_seconds, human_age, human_bytes

if TYPE_CHECKING:
    from impyard.status.model import Status

LABEL = 10  # width of the section names, so the values line up


def _line(label: str, text: str) -> str:
    return f"{label:<{LABEL}} {text}"


def _more(text: str) -> str:
    return " " * (LABEL + 3) + text


def _engine(s: Status) -> list[str]:
    e = s.engine
    if not e.reachable:
        return [_line("engine", f"DOWN  {e.error}")]
    api = f" (API {e.api_version})" if e.api_version else ""
    return [_line("engine", f"ok  docker {e.version or '?'}{api} at {e.url}")]


def _images(s: Status) -> list[str]:
    marks = {"present": "ok", "missing": "MISSING", "unknown": "unknown"}
    parts = [f"{i.image} {marks[i.state]} ({', '.join(i.used_by)})" for i in s.images]
    return [_line("images", parts[0] if parts else "none named")] + [_more(p) for p in parts[1:]]


def _serve(s: Status) -> list[str]:
    if not s.serve.running:
        return [_line("serve", "not running")]
    now = _now(s)
    lines = []
    for p in s.serve.processes:
        age = human_age(age_seconds(p.started_at, now))
        once = ", --once" if p.once else ""
        text = f"running  pid {p.pid} since {p.started_at or '?'} ({age}), "
        lines.append(f"{text}concurrency {p.concurrency or '?'}{once}")
    return [_line("serve", lines[0])] + [_more(line) for line in lines[1:]]


def _queue(s: Status) -> list[str]:
    q = s.queue
    if q.error:
        return [_line("queue", f"{'LOCKED' if q.locked else 'UNREADABLE'}  {q.error}")]
    parts = [f"{state} {n}" for state, n in q.counts.items()]
    if q.oldest_queued_at:
        parts[0] += f" (oldest {human_age(age_seconds(q.oldest_queued_at, _now(s)))})"
    return [_line("queue", "  ".join(parts))]


def _runs(s: Status) -> list[str]:
    if not s.runs:
        return [_line("runs", "none unfinished")]
    lines = [_line("runs", f"{len(s.runs)} unfinished")]
    for r in s.runs:
        lines.append(
            _more(f"{r.run_id}  {r.imp}  {r.mode or '?'}  {r.state}  {human_age(r.age_seconds)}")
        )
    return lines


def _leases(s: Status) -> list[str]:
    if s.queue.error:  # leases live in the same database
        return [_line("leases", "unknown (the queue database could not be read)")]
    if not s.leases:
        return [_line("leases", "none held")]
    parts = [
        f"{lease.imp}: {lease.holder} (heartbeat {human_age(lease.heartbeat_age_seconds)} ago"
        + ("" if lease.live else ", expired")
        + ")"
        for lease in s.leases
    ]
    return [_line("leases", parts[0])] + [_more(p) for p in parts[1:]]


def _knowledge(s: Status) -> list[str]:
    if not s.knowledge:
        return [_line("knowledge", "no imps")]
    pending = [
        f"{k.imp}: "
        + (
            f"UNREADABLE {k.error}"
            if k.error
            else f"{k.quarantines} quarantined, {k.candidates} candidate(s)"
        )
        for k in s.knowledge
        if k.error or k.quarantines or k.candidates
    ]
    head = f"{len(s.knowledge)} imp(s); " + ("pending: " if pending else "nothing pending")
    if not pending:
        return [_line("knowledge", head)]
    return [_line("knowledge", head + pending[0])] + [_more(p) for p in pending[1:]]


def _backup(s: Status) -> list[str]:
    b = s.backup
    if not b.configured_remotes and not b.status_present:
        return [_line("backup", "not configured")]
    lines: list[str] = []
    current = 0
    for imp in b.imps:
        if imp.never_backed_up:
            lines.append(f"{imp.imp}: never backed up")
        for r in imp.remotes:
            if r.state == "current":
                current += 1
            elif r.state == "failing":
                error = (r.last_error or "").splitlines()
                tries = f", {r.attempts} attempt(s)" if r.attempts else ""
                lines.append(
                    f"{imp.imp} -> {r.remote}: FAILING since {r.failing_since or '?'}{tries}"
                    + (f": {error[0][:80]}" if error else "")
                )
            elif r.state == "lagging":
                behind = f"{r.behind} commit(s)" if r.behind is not None else "commits"
                lines.append(f"{imp.imp} -> {r.remote}: {behind} behind, pushed {r.pushed_at}")
            else:
                lines.append(f"{imp.imp} -> {r.remote}: unknown")
    head = f"{b.configured_remotes} remote(s); {current} imp/remote pair(s) current"
    if b.error:
        lines.insert(0, f"UNREADABLE {b.error}")
    return [_line("backup", head)] + [_more(line) for line in lines]


def _disk(s: Status) -> list[str]:
    d = s.disk
    if d.error:
        return [_line("disk", f"UNREADABLE  {d.error}")]
    low = "  LOW" if d.free_ratio < d.min_free_ratio else ""
    head = (
        f"{human_bytes(d.free_bytes)} free of {human_bytes(d.total_bytes)} "
        f"({d.free_ratio:.1%}){low}"
    )
    parts = [f"{u.name} {'' if u.complete else '>='}{human_bytes(u.bytes)}" for u in d.usage]
    return [_line("disk", head), _more("  ".join(parts))]


def _policy(s: Status) -> list[str]:
    p = s.policy
    if p.deployed:
        return [_line("policy", f"deployed (compiled {p.compiled_at})")]
    refused = f"; {len(p.invalid)} error(s), below" if p.invalid else ""
    return [_line("policy", f"NOT DEPLOYED  {'; '.join(p.changes)}{refused}")]


def _cluster(s: Status) -> list[str]:
    if not s.cluster.enabled:
        return []
    if not s.cluster.nodes:
        return [_line("cluster", "enabled, no node has reported")]
    ready = sum(n.state == "ready" for n in s.cluster.nodes)
    lines = [_line("cluster", f"{ready} of {len(s.cluster.nodes)} node(s) ready")]
    for n in s.cluster.nodes:
        runtimes = ",".join(n.runtimes)
        lines.append(_more(f"{n.name}  {n.state}  {n.boxes}/{n.capacity} boxes  {runtimes}"))
    return lines


def _warm(s: Status) -> list[str]:
    w = s.warm
    if not w.in_use:
        return []
    ready, wanted = sum(p.ready for p in w.pools), sum(p.wanted for p in w.pools)
    claim = (
        "" if w.claim_ms_p50 is None else f", claim {w.claim_ms_p50:g} ms (p95 {w.claim_ms_p95:g})"
    )
    head = (
        f"{ready} of {wanted} ready box(es) in {len(w.pools)} pool(s); last {w.recent_runs} "
        f"run(s): {w.hits} hit(s), {w.misses} miss(es){claim}"
    )
    lines = [_line("warm", head)]
    for p in w.pools:
        lines.append(_more(f"{p.key}  {p.ready}/{p.wanted} ready  {p.image}  {p.runtime}"))
    return lines


def _now(s: Status) -> datetime:
    return datetime.fromisoformat(s.generated_at)


def render(s: Status) -> list[str]:
    lines = [f"impyard status  {s.home}  {s.generated_at}"]
    for section in (
        _engine,
        _images,
        _serve,
        _cluster,
        _warm,
        _queue,
        _runs,
        _leases,
        _knowledge,
        _backup,
        _disk,
        _policy,
    ):
        lines.extend(section(s))
    if not s.problems and not s.warnings:
        lines.append(_line("problems", "none"))
    lines.extend(f"PROBLEM  {p.code}: {p.message}" for p in s.problems)
    lines.extend(f"warning  {w.code}: {w.message}" for w in s.warnings)
    return lines


def register(app: typer.Typer) -> None:
    @app.command("status")
    def status_command(
        ctx: typer.Context,
        as_json: bool = typer.Option(False, "--json", help="One JSON document."),
    ) -> None:
        """The data root at a glance; exit non-zero when there is any problem."""
        from impyard.status.collect import StatusProblemsError, collect

        home = initialized_home(ctx)
        resolved = state(ctx).resolved
        status = collect(home, state(ctx).settings)
        if as_json:
            extra = {"ok": status.ok, "home_source": resolved.source}
            print_json(status.model_dump(mode="json") | extra)
        else:
            head, *rest = render(status)
            for line in [head, _line("data root", resolved.describe()), *rest]:
                echo(line)
        if status.problems:
            raise StatusProblemsError(status.problems)
