"""``impyard check box``: the tmpfs container primitive, verified."""

from __future__ import annotations

import typer

from impyard.cli.shared import complete
from impyard.cli.shared._common import echo, print_json, state
from impyard.common.contract import DEFAULT_IMAGE
from impyard.common.errors import UsageError

check_app = typer.Typer(
    name="check",
    help="Verify this host's container primitives.",
    no_args_is_help=True,
)


@check_app.command("box")
def box(
    ctx: typer.Context,
    image: str = typer.Option(DEFAULT_IMAGE, "--image", help="Box image to verify."),
    imp: str | None = typer.Option(
        None,
        "--imp",
        help="Use this imp's memory limit and runtime (default: the org policy's).",
        autocompletion=complete.imps,
    ),
    runtime: str | None = typer.Option(
        None,
        "--runtime",
        help="Engine runtime to check: runc or runsc (gVisor); default: the policy's box.runtime.",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON document."),
) -> None:
    """Run the tmpfs /tmp primitive in a box and check every property of it."""
    from impyard.box.checks.check import CheckFailedError, check_box
    from impyard.policy.compile import deployed_org_policy, policy_for_run

    app_state = state(ctx)
    home, settings = app_state.home, app_state.settings
    if imp is not None:
        from impyard.imp_lookup import require_imp_name

        require_imp_name(home, imp)
        policy, _warnings = policy_for_run(home, imp, strict=settings.strict_policy)
    else:
        policy = deployed_org_policy(home)
    if runtime is not None and runtime not in ("runc", "runsc"):
        raise UsageError(f"--runtime must be runc or runsc, not {runtime!r}")
    chosen = runtime or policy.box.runtime
    if as_json:
        report = check_box(image, settings, home, policy.box.memory_bytes, chosen)
        print_json(report.to_json())
    else:
        from impyard.box.checks.check import row_names
        from impyard.cli.setup.check_rows import RowPrinter

        # Each row as its check finishes (the whole run takes 6-12 s); the title waits for
        # the first, so a missing image or engine prints only its error line.
        rows = RowPrinter(f"impyard check box: {image} under {chosen}", row_names(chosen))
        report = check_box(image, settings, home, policy.box.memory_bytes, chosen, rows.put)
        if report.ok:
            echo(f"all box checks passed; checkout: {report.checkout}")
    if not report.ok:
        raise CheckFailedError(report)


def register(app: typer.Typer) -> None:
    app.add_typer(check_app, name="check")
