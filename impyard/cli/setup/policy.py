"""``impyard deploy`` and ``impyard policy show``: compile owner policy, and explain it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer

from impyard.cli.shared import complete
from impyard.cli.shared._common import error, initialized_home, print_json, warn
from impyard.cli.shared._table import Column, print_table

if TYPE_CHECKING:  # imported lazily: every CLI start-up would pay for pydantic
    from impyard.policy import DeployReport, Policy, ShownPolicy
    from impyard.policy.gateway import GatewayRoute
    from impyard.preflight import Finding

ORG_ROW = "(org)"


def _limits(policy: Policy) -> dict[str, Any]:
    k, b, g = policy.knowledge, policy.box, policy.gateway
    return {
        "knowledge": k.enabled,
        "max_file_chars": k.max_file_chars,
        "max_repo_bytes": k.max_repo_bytes,
        "checkpoint": k.checkpoint_on_clean_exit,
        "memory_bytes": b.memory_bytes,
        "cpus": b.cpus,
        "pids_limit": b.pids_limit,
        "timeout_seconds": b.timeout_seconds,
        "gateway": g.enabled,
        "allow_rules": len(g.allow),
        "routes": len(g.route),
        "requests_per_run": g.budget.requests_per_run,
    }


def _cell(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def _print_deploy(report: DeployReport) -> None:
    """One row per limit and one column per policy (the org's, then each imp's): a dozen
    limits side by side would not fit 80 columns, a few policies do."""
    policies = [(ORG_ROW, report.org), *sorted(report.imps.items())]
    columns = [Column("limit")] + [Column(name, justify="right") for name, _ in policies]
    limits = [_limits(policy) for _, policy in policies]
    rows = [[key, *(_cell(each[key]) for each in limits)] for key in _limits(report.org)]
    print_table(columns, rows, title=f"compiled {report.compiled_path}", wrap_piped=True)


def _deploy_json(report: DeployReport, findings: list[Finding]) -> dict[str, Any]:
    return {
        "ok": True,
        "compiled": str(report.compiled_path),
        "org": _limits(report.org),
        "imps": {imp: _limits(policy) for imp, policy in sorted(report.imps.items())},
        "sources": report.sources,
        "routes": [_route(r) for r in _routes(report)],
        "warnings": [f.as_dict() for f in findings],
    }


def _routes(report: DeployReport) -> list[GatewayRoute]:
    """Every route of the org and the overlays, once per name and upstream."""
    seen: dict[tuple[str, str], GatewayRoute] = {}
    for policy in (report.org, *report.imps.values()):
        for route in policy.gateway.route:
            seen.setdefault((route.name, route.upstream), route)
    return list(seen.values())


def _route(route: GatewayRoute) -> dict[str, Any]:
    secret = f"env {route.secret_env}" if route.secret_env else f"file {route.secret_file}"
    return {
        "route": route.name,
        "upstream": route.upstream,
        "secret": secret,
        "allow_private": route.allow_private,
    }


def _findings(report: DeployReport) -> list[Finding]:
    from impyard.preflight import route_findings

    found: dict[str, Finding] = {}
    for route in _routes(report):
        for finding in route_findings(route):
            found.setdefault(finding.message, finding)
    return list(found.values())


def _print_routes(routes: list[GatewayRoute]) -> None:
    columns = [
        Column("route"),
        Column("upstream", wrap=True, min_width=20),
        Column("secret", wrap=True),
        Column("private"),
    ]
    rows = [
        [r["route"], r["upstream"], r["secret"], "allowed" if r["allow_private"] else "refused"]
        for r in map(_route, routes)
    ]
    print_table(columns, rows, title="gateway routes", wrap_piped=True)


def _print_show(shown: ShownPolicy) -> None:
    from impyard.policy.violation import render

    overlay = shown.overlay_file or "none"
    columns = [
        Column("key"),
        Column("value", wrap=True, min_width=20),
        Column("source"),
        Column("overlay may", optional=True),
    ]
    rows = [
        [key, render(sourced.value), sourced.source, sourced.overlay_rule.rule]
        for key, sourced in shown.values.items()
    ]
    title = f"policy of imp {shown.imp} (org {shown.org_file}; overlay {overlay})"
    print_table(columns, rows, title=title, wrap_piped=True)


def register(app: typer.Typer) -> None:
    policy_app = typer.Typer(help="Inspect owner policy.", no_args_is_help=True)
    app.add_typer(policy_app, name="policy")

    @app.command("deploy")
    def deploy_command(
        ctx: typer.Context,
        as_json: bool = typer.Option(False, "--json", help="Print one JSON document."),
    ) -> None:
        """Check org and every imp overlay; write policy/compiled.json only if all are valid."""
        from impyard.policy import PolicyError, deploy

        home = initialized_home(ctx)
        try:
            report = deploy(home)
        except PolicyError as exc:
            if not as_json:
                raise  # the entry point prints every violation on stderr, no traceback
            print_json({"ok": False, "violations": [v.as_dict() for v in exc.violations]})
            error(exc.message)
            raise typer.Exit(exc.exit_code) from exc
        findings = _findings(report)
        if as_json:
            print_json(_deploy_json(report, findings))
        else:
            _print_deploy(report)
            routes = _routes(report)
            if routes:
                _print_routes(routes)
        for finding in findings:
            warn(finding.message)

    @policy_app.command("show")
    def show_command(
        ctx: typer.Context,
        imp: str = typer.Argument(
            ...,
            help="Imp name (imps without an overlay get the org's).",
            autocompletion=complete.imps,
        ),
        as_json: bool = typer.Option(False, "--json", help="Print one JSON document."),
    ) -> None:
        """The imp's effective policy from the current files, and where each value came from."""
        from impyard.imp_lookup import checked_imp_name, unknown_imp
        from impyard.policy import effective_policy_with_sources

        home = initialized_home(ctx)
        checked_imp_name(home, imp)
        if not home.repo(imp).is_dir() and not home.imp_policy(imp).exists():
            # Any name would show the org's policy: a typo must not look like an answer.
            raise unknown_imp(home, imp, also=f"and no overlay {home.imp_policy(imp)}")
        shown = effective_policy_with_sources(home, imp)
        if shown.stale:
            warn(f"compiled policy differs from these files ({shown.stale}): run `impyard deploy`")
        if as_json:
            print_json(shown.as_dict())
        else:
            _print_show(shown)
