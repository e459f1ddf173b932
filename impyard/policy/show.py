"""``impyard policy show``: an imp's effective policy and which file each value came from."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from impyard.home import Home
from impyard.policy.compile import compile_imp, stale_reason
from impyard.policy.load import Table, read_source
from impyard.policy.models import Overlay, Policy
from impyard.policy.overlay import get, leaf_keys, plain

ValueSource = Literal["default", "org", "overlay"]


@dataclass(frozen=True)
class SourcedValue:
    value: Any
    source: ValueSource
    overlay_rule: Overlay


@dataclass(frozen=True)
class ShownPolicy:
    imp: str
    policy: Policy
    values: dict[str, SourcedValue]  # dotted key -> value and where it came from
    org_file: Path
    overlay_file: Path | None
    stale: str | None  # why compiled.json does not match these sources, if it does not

    def as_dict(self) -> dict[str, Any]:
        return {
            "imp": self.imp,
            "org_file": str(self.org_file),
            "overlay_file": str(self.overlay_file) if self.overlay_file else None,
            "stale": self.stale,
            "values": {
                key: {"value": v.value, "source": v.source, "overlay_rule": v.overlay_rule.rule}
                for key, v in self.values.items()
            },
        }


def _has(table: Table | None, key: str) -> bool:
    node: Any = table
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def effective_policy_with_sources(home: Home, imp: str) -> ShownPolicy:
    """Compiled from the current sources; raises PolicyError when they are invalid."""
    policy = compile_imp(home, imp)
    ignored: list[Any] = []  # compile_imp has already reported any read problem
    org_table = read_source(home.org_policy, ignored).table
    overlay_path = home.imp_policy(imp)
    overlay_table = read_source(overlay_path, ignored).table if overlay_path.exists() else None
    values: dict[str, SourcedValue] = {}
    for key, rule in leaf_keys():
        source: ValueSource = "default"
        if _has(overlay_table, key):
            source = "overlay"
        elif _has(org_table, key):
            source = "org"
        values[key] = SourcedValue(plain(get(policy, key)), source, rule)
    return ShownPolicy(
        imp=imp,
        policy=policy,
        values=values,
        org_file=home.org_policy,
        overlay_file=overlay_path if overlay_table is not None else None,
        stale=stale_reason(home, imp),
    )
