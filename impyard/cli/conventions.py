"""How every command reads in ``--help`` and in a usage error, applied once to the whole
command tree instead of in each of the ~110 command declarations.

Typer describes a parameter by its Python type (``--reorganize <bool>``, ``{imp}``,
``--timeout <float range>``): a reader takes ``<bool>`` for a value to type, and
``--reorganize true`` then fails. Here a flag shows no placeholder, an argument shows its
name in capitals (``IMP``, ``RUN``) and an option's value a word (``PATH``, ``N``, ``IMP``).
A group's list of commands shows each command's first paragraph whole, folded onto more
lines, where click would cut it with ``...`` at the first sentence that overflows one line
(shell completion keeps click's short form: a description there is one line).
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from typing import Any

import typer
from typer.core import TyperArgument, TyperGroup, TyperOption

#: ``-h`` as well as ``--help`` on every command: click contexts inherit this from the root.
CONTEXT_SETTINGS: dict[str, Any] = {"help_option_names": ["-h", "--help"]}


class NamedArgument(TyperArgument):
    """An argument shown by its metavar alone: ``IMP`` in the usage line and the help."""

    def _usage_display_name(self) -> str:
        name = self.display_name_raw
        name = name if self.required else f"[{name}]"
        return name + ("..." if self.nargs != 1 else "")

    def display_type_rich(self, ctx: Any) -> str | None:
        return None


def _argument_metavar(name: str) -> str:
    # run_id -> RUN, task_id -> TASK: the word the README uses for what is typed there.
    return name.removesuffix("_id").replace("_", "-").upper()


def _option_metavar(option: TyperOption) -> str | None:
    if option.is_flag or option.count:
        return None
    desc = option.type_descriptor
    if desc.is_choice and desc.choices is not None:
        return "|".join(str(getattr(c, "value", c)) for c in desc.choices)
    if desc.is_path:
        return "PATH"
    annotation = desc.annotation
    if annotation is int:
        return "N"
    if annotation is float:
        return "NUMBER"
    return (option.name or "value").replace("_", "-").upper()


class _WholeSummaries(TyperGroup):
    """Lists each command of the group with its whole summary; mixed into the group's own
    class (``knowledge`` and ``memory`` have theirs), so it changes nothing else."""

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        rows = []
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                rows.append((name, _summary(cmd.help) if cmd.help else cmd.get_short_help_str()))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


_SUMMARY_CLASSES: dict[type, type] = {}


def _with_whole_summaries(cls: type) -> type:
    if issubclass(cls, _WholeSummaries):
        return cls
    if cls not in _SUMMARY_CLASSES:
        _SUMMARY_CLASSES[cls] = type(cls.__name__, (_WholeSummaries, cls), {})
    return _SUMMARY_CLASSES[cls]


def _summary(help_text: str) -> str:
    """The first paragraph of a command's help, on one line: what ``-h`` lists for it."""
    first = inspect.cleandoc(help_text).split("\n\n")[0]
    return " ".join(first.split())


def _commands(command: Any) -> Iterator[Any]:
    yield command
    for sub in getattr(command, "commands", {}).values():
        yield from _commands(sub)


def apply(command: Any) -> Any:
    """Give every parameter under ``command`` a plain metavar and every group a listing of
    whole summaries; return ``command``."""
    for cmd in _commands(command):
        if isinstance(cmd, TyperGroup):
            # The class only changes how its commands are listed, never how it parses.
            cmd.__class__ = _with_whole_summaries(type(cmd))
        for param in cmd.params:
            if isinstance(param, TyperArgument):
                if param.metavar is None and param.name:
                    param.metavar = _argument_metavar(param.name)
                # The class only changes how the argument is shown, never how it parses.
                param.__class__ = NamedArgument
            elif isinstance(param, TyperOption) and param.metavar is None:
                param.metavar = _option_metavar(param)
    return command


def click_command(app: typer.Typer) -> Any:
    """The click command typer builds for ``app``, with the conventions above applied."""
    return apply(typer.main.get_command(app))
