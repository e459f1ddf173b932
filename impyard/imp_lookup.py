"""Which imps a data root has, and the one way a typed imp name is resolved: the imp, or
one line saying it is not one, with the closest names it has.

A ground module (paths and names only, no git): the knowledge catalogue, interaction
memory and every command that takes an imp share it, so a typo reads the same everywhere.
"""

from __future__ import annotations

import difflib

from impyard.common.errors import NotFoundError, UsageError
from impyard.common.names import check_imp_name
from impyard.home import Home

#: Suggestions one error names at most.
SUGGESTED = 3


def known_imps(home: Home) -> list[str]:
    """Every imp of ``home``, sorted: a directory of ``knowledge/`` holding ``repo.git``."""
    if not home.knowledge_dir.is_dir():
        return []
    names = []
    for entry in home.knowledge_dir.iterdir():
        # Hidden staging directories and stray files never name an imp.
        if entry.name.startswith(".") or not (entry / "repo.git").is_dir():
            continue
        names.append(entry.name)
    return sorted(names)


def close_names(imp: str, known: list[str]) -> list[str]:
    """The names of ``known`` closest to ``imp`` (a typo of one), best first."""
    return difflib.get_close_matches(imp, known, n=SUGGESTED) or difflib.get_close_matches(
        imp.lower(), known, n=SUGGESTED
    )


def did_you_mean(imp: str, known: list[str]) -> str:
    """``did you mean 'yuko'?`` for the closest names, or '' when none is close."""
    close = close_names(imp, known)
    return f"did you mean {' or '.join(repr(name) for name in close)}?" if close else ""


def unknown_imp(home: Home, imp: str, *, also: str = "") -> NotFoundError:
    """The error for a name that is no imp of ``home`` (``also``: what else it is not,
    for a command that accepts more than a current imp, e.g. ``and no runs of it``)."""
    hint = did_you_mean(imp, known_imps(home)) or f"create it with `impyard imp create {imp}`"
    return NotFoundError(f"no imp named {imp!r}{f' {also}' if also else ''} ({hint})")


def checked_imp_name(home: Home, imp: str) -> str:
    """``imp`` if it is a valid imp name; else the invalid-name error, with the closest
    imps when there are any (``Yuko`` for ``yuko``)."""
    try:
        return check_imp_name(imp)
    except UsageError as exc:
        hint = did_you_mean(imp, known_imps(home))
        if not hint:
            raise
        raise UsageError(f"{exc.message} ({hint})") from None


def require_imp_name(home: Home, imp: str) -> str:
    """``imp`` when ``home`` has that imp; else one line naming the closest imps."""
    checked_imp_name(home, imp)
    if not home.repo(imp).is_dir():
        raise unknown_imp(home, imp)
    return imp
