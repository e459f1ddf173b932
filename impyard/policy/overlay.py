"""Tighten-only overlays: an imp's effective policy may never grant more than the org's.

Each leaf key carries one ``Overlay`` rule (see ``models.py``). The overlay is merged over the
org table, the result is type-checked like any policy, and then every key of the result is
compared with the org value under its rule. Comparing the merged result (instead of the
overlay's keys) means a key the overlay omits can never be a violation.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from impyard.policy.load import Table, merge, validate
from impyard.policy.models import GatewayAllow, GatewayRoute, Overlay, Policy
from impyard.policy.violation import PolicyViolation


def overlay_rule(model: type[BaseModel], field: str) -> Overlay | None:
    for item in model.model_fields[field].metadata:
        if isinstance(item, Overlay):
            return item
    return None


def leaf_keys(model: type[BaseModel] = Policy, prefix: str = "") -> Iterator[tuple[str, Overlay]]:
    """Every leaf key of the policy (dotted) with its overlay rule; nested tables recurse."""
    for name, info in model.model_fields.items():
        key = f"{prefix}{name}"
        rule = overlay_rule(model, name)
        annotation = info.annotation
        if rule is None and isinstance(annotation, type) and issubclass(annotation, BaseModel):
            yield from leaf_keys(annotation, f"{key}.")
        elif rule is None:  # pragma: no cover - guarded by test_every_key_has_an_overlay_rule
            raise TypeError(f"policy key {key} has no overlay rule")
        else:
            yield key, rule


def get(policy: BaseModel, key: str) -> Any:
    node: Any = policy
    for part in key.split("."):
        node = getattr(node, part)
    return node


def plain(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump()
    if isinstance(value, list):
        return [plain(item) for item in value]
    return value


def _subset(file: str, key: str, kept: list[Any], granted: list[Any]) -> Iterator[PolicyViolation]:
    for index, entry in enumerate(kept):
        assert isinstance(entry, GatewayAllow | GatewayRoute)
        if any(entry.within(grant) for grant in granted):
            continue
        if isinstance(entry, GatewayAllow):
            what = f"host {entry.host} ports {entry.ports} methods {entry.methods}"
            if entry.request_bytes is not None:
                what += f" request_bytes {entry.request_bytes}"
            elif any(isinstance(g, GatewayAllow) and g.request_bytes for g in granted):
                what += " without a request_bytes cap"
            hint = "no org allow rule covers"
        else:
            what = f"route {entry.name!r} methods {entry.methods}"
            hint = "no identical org route (same upstream and credential, a superset of methods)"
        yield PolicyViolation(
            file=file,
            key=f"{key}[{index}]",
            rule="not-granted",
            message=f"{hint} {what}",
            org_value=plain(granted),
            attempted_value=plain(entry),
        )


def tighten_violations(org: Policy, effective: Policy, file: str) -> list[PolicyViolation]:
    """Every way ``effective`` grants more than (or changes what only) ``org`` may set."""
    violations: list[PolicyViolation] = []
    for key, marker in leaf_keys():
        was, now = get(org, key), get(effective, key)
        if marker.rule == "subset":
            violations.extend(_subset(file, key, now, was))
            continue
        if marker.rule == "superset":
            dropped = [entry for entry in was if entry not in now]
            if dropped:
                message = f"an overlay may add entries, never drop the org's: {', '.join(dropped)}"
                violations.append(
                    PolicyViolation(file, key, "removes-requirement", message, was, now)
                )
            continue
        if now == was or marker.rule == "free":
            continue
        problem: tuple[str, str] | None = None
        if marker.rule == "lower" and now > was:
            problem = ("enlarges-limit", f"may only be lowered (org limit {was})")
        elif marker.rule == "disable" and now and not was:
            problem = ("enables-feature", "the org turned this off; an overlay may not turn it on")
        elif marker.rule == "require" and was and not now:
            problem = ("removes-requirement", "the org requires this; an overlay may not drop it")
        elif marker.rule == "harden" and marker.order.index(now) < marker.order.index(was):
            order = " -> ".join(marker.order)
            problem = ("weakens-isolation", f"may only move towards {marker.order[-1]} ({order})")
        elif marker.rule == "fixed":
            problem = ("org-only", "only the org policy sets this key")
        if problem is not None:
            rule, message = problem
            violations.append(PolicyViolation(file, key, rule, message, plain(was), plain(now)))
    return violations


def _without(table: Table, locs: list[tuple[str | int, ...]]) -> Table:
    """A copy of ``table`` without the keys at ``locs`` (a list is dropped whole)."""
    pruned = copy.deepcopy(table)
    for loc in locs:
        node: Any = pruned
        for depth, part in enumerate(loc):
            if not isinstance(node, dict) or not isinstance(part, str) or part not in node:
                break
            last = depth == len(loc) - 1 or not isinstance(node[part], dict)
            if last:
                del node[part]
                break
            node = node[part]
    return pruned


def apply_overlay(
    org_table: Table, org: Policy, overlay: Table, path: Path
) -> tuple[Policy | None, list[PolicyViolation]]:
    """The imp's effective policy, or None with every violation of ``overlay``."""
    effective, violations = validate(merge(org_table, overlay), path, org=org_table)
    if effective is None:
        # Still judge the overlay's well-formed keys, so one deploy lists every problem
        # instead of revealing an enlarged limit only after a typo is fixed.
        locs = [tuple(v.loc) for v in violations]
        partial, _ = validate(merge(org_table, _without(overlay, locs)), path, org=org_table)
        if partial is not None:
            violations += tighten_violations(org, partial, str(path))
        return None, violations
    violations = tighten_violations(org, effective, str(path))
    return (effective if not violations else None), violations
