"""A usage error as the README promises every error: ``impyard: error: <message>`` on one
line, then at most one hint naming the help of the command that was typed."""

from __future__ import annotations

from typer._click.exceptions import NoArgsIsHelpError, UsageError
from typer.exceptions import TyperException


def usage_error_lines(exc: TyperException) -> list[str]:
    """The lines to print on stderr for ``exc``, a click exception raised while parsing."""
    if isinstance(exc, NoArgsIsHelpError):
        # A group typed alone (``impyard imp``): its help is the answer, as before.
        return [exc.format_message().rstrip("\n")]
    message = " ".join(exc.format_message().split())
    lines = [f"impyard: error: {message}"]
    if isinstance(exc, UsageError) and exc.ctx is not None:
        lines.append(f"(see '{exc.ctx.command_path} -h')")
    return lines
