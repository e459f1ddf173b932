"""What every policy model shares: strict parsing and the overlay rule of each key."""

from __future__ import annotations

import re
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict

#: An environment variable name (secret_env of a route, keys of [box.env]).
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

OverlayRule = Literal[
    "lower", "disable", "require", "fixed", "free", "subset", "superset", "harden"
]


@dataclass(frozen=True)
class Overlay:
    """How an imp overlay may change a key.

    lower    the overlay may lower the value, never raise it (limits, budgets)
    disable  the overlay may turn it off, never on (features)
    require  the overlay may turn it on, never off (safety requirements)
    fixed    only the org file sets it; an overlay must repeat the org value or omit it
    free     the overlay may set any valid value (it picks what runs, not what it may do)
    subset   the overlay may drop entries; each entry it keeps must fit within an org entry
    superset the overlay may add entries, never drop one the org lists (lists that protect,
             like the query parameters redacted from receipts)
    harden   the overlay may move the value later in ``order`` (weakest first), never
             earlier (the box runtime: runc to runsc, never back)
    """

    rule: OverlayRule
    order: tuple[str, ...] = ()


LOWER = Overlay("lower")
DISABLE = Overlay("disable")
REQUIRE = Overlay("require")
FIXED = Overlay("fixed")
FREE = Overlay("free")
SUBSET = Overlay("subset")
SUPERSET = Overlay("superset")
#: The box runtimes, weakest isolation first.
RUNTIME_ORDER = ("runc", "runsc")
HARDEN_RUNTIME = Overlay("harden", RUNTIME_ORDER)
#: Which runs may write knowledge, most permissive first.
WRITE_FROM_ORDER = ("any-run", "clean-room")
HARDEN_WRITE_FROM = Overlay("harden", WRITE_FROM_ORDER)


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


def _unique(values: Sequence[Hashable], what: str) -> None:
    if len(set(values)) != len(values):
        raise ValueError(f"{what} are listed more than once")
