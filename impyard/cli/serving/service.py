"""``impyard service install|print``: run ``impyard serve`` as a systemd service."""

from __future__ import annotations

import shlex
from pathlib import Path

import typer

from impyard.cli.shared._common import echo, state, warn

#: The service's data root when none is given (flag, IMPYARD_HOME or a found .impyard).
SERVICE_HOME = Path("/var/lib/impyard")
_HOME_HELP = (
    "Data root the service serves (default: this invocation's --home, IMPYARD_HOME or "
    "found .impyard, else /var/lib/impyard)."
)
_ENV_HELP = "Secrets and IMPYARD_* settings for serve, KEY=VALUE lines (may be absent)."
_USER_HELP = "Run serve as this user (default root, which loop mounts and setns need)."


def _unit(
    ctx: typer.Context, home: Path | None, env_file: Path | None, user: str | None
) -> tuple[str, list[str]]:
    """The unit text and warnings for the owner."""
    from impyard.home import Home
    from impyard.service.unit import (
        DEFAULT_ENV_FILE,
        UnitOptions,
        grace_from_env_file,
        impyard_command,
        render_unit,
    )

    app_state = state(ctx)
    if home is not None:
        root = home.absolute()
    elif app_state.resolved.source == "user":
        # A system service does not serve one user's default data root.
        root = SERVICE_HOME
    else:
        root = app_state.home.root
    env = (env_file or DEFAULT_ENV_FILE).absolute()
    grace = grace_from_env_file(env)
    options = UnitOptions(
        command=impyard_command(),
        home=root,
        env_file=env,
        user=user,
        grace_seconds=app_state.settings.shutdown_grace_seconds if grace is None else grace,
    )
    text = render_unit(options)
    warnings = []
    if not Home(root).is_initialized():
        where = shlex.quote(str(root))
        warnings.append(f"no data root at {root} yet: run `impyard --home {where} init` first")
    if user is not None and user not in ("root", "0"):
        warnings.append(
            f"as {user}, serve cannot loop-mount run spaces (they become plain directories, "
            "bounded only by admission) nor enter box network namespaces, which the gateway "
            "needs: keep root unless the gateway is off"
        )
    return text, warnings


def register(app: typer.Typer) -> None:
    service_app = typer.Typer(
        help="Run `impyard serve` as a systemd service.", no_args_is_help=True
    )

    @service_app.command("print")
    def print_command(
        ctx: typer.Context,
        home: Path | None = typer.Option(None, "--home", help=_HOME_HELP, show_default=False),
        env_file: Path | None = typer.Option(
            None, "--env-file", help=_ENV_HELP + " [default: /etc/impyard/impyard.env]"
        ),
        user: str | None = typer.Option(None, "--user", help=_USER_HELP),
    ) -> None:
        """Print the systemd unit `service install` would write."""
        text, warnings = _unit(ctx, home, env_file, user)
        for message in warnings:
            warn(message)
        typer.echo(text, nl=False)

    @service_app.command("install")
    def install_command(
        ctx: typer.Context,
        home: Path | None = typer.Option(None, "--home", help=_HOME_HELP, show_default=False),
        env_file: Path | None = typer.Option(
            None, "--env-file", help=_ENV_HELP + " [default: /etc/impyard/impyard.env]"
        ),
        user: str | None = typer.Option(None, "--user", help=_USER_HELP),
        path: Path = typer.Option(
            Path("/etc/systemd/system/impyard.service"), "--path", help="Where to write the unit."
        ),
        force: bool = typer.Option(False, "--force", help="Replace a different existing unit."),
    ) -> None:
        """Write the systemd unit for `impyard serve`, then say how to enable it."""
        from impyard.service.install import install_unit

        text, warnings = _unit(ctx, home, env_file, user)
        for message in warnings:
            warn(message)
        result = install_unit(path.absolute(), text, force=force)
        if result.action == "unchanged":
            echo(f"{result.path} already holds this unit")
        else:
            echo(f"{result.action} {result.path}")
        name = result.path.name.removesuffix(".service")
        echo(f"enable it: systemctl daemon-reload && systemctl enable --now {name}")

    app.add_typer(service_app, name="service")
