"""``impyard deploy``: compile org + overlays into ``compiled.json``, and what runs read back.

compiled.json is written atomically and only when every file is valid, so a run always sees
either the previous good policy or the new one. It records a fingerprint (sha256, size,
mtime) of every source file. A source is *stale* for an imp when the content of ``org.toml``
or of that imp's overlay differs from what was compiled, or the overlay appeared or vanished
(mtime alone is informational: touching a file is not a change). Staleness is judged per imp,
so an owner half-way through editing one imp's overlay does not stop every other imp.

Stale policy at run time (``Settings.strict_policy``):
- strict: refuse with a ConfigError telling the owner to run ``impyard deploy``;
- default: compile this imp's policy from the sources now and use it, with a warning. If the
  sources are invalid the run is refused: a run never uses a policy nobody could deploy.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from impyard.common.errors import ConfigError, EngineError
from impyard.common.fsutil import atomic_write_json
from impyard.common.names import check_imp_name, utc_now
from impyard.home import Home
from impyard.policy.load import Source, check_overlay_name, overlay_paths, read_source, validate
from impyard.policy.models import Policy
from impyard.policy.overlay import apply_overlay
from impyard.policy.violation import PolicyError, PolicyViolation

FORMAT = 1
ORG_KEY = "org.toml"

Fingerprint = dict[str, Any]


def _relative(home: Home, path: Path) -> str:
    return path.relative_to(home.policy_dir).as_posix()


def overlay_key(imp: str) -> str:
    return f"imps/{imp}.toml"


def fingerprint(source: Source) -> Fingerprint:
    try:
        mtime_ns = source.path.stat().st_mtime_ns
    except OSError:
        mtime_ns = None
    return {
        "sha256": hashlib.sha256(source.data).hexdigest(),
        "size": len(source.data),
        "mtime_ns": mtime_ns,
    }


@dataclass(frozen=True)
class DeployReport:
    """What a deploy compiled: the org policy and each overlay imp's effective policy."""

    compiled_path: Path
    org: Policy
    imps: dict[str, Policy]
    overlays: dict[str, Path]
    sources: dict[str, Fingerprint]

    def policy_for(self, imp: str) -> Policy:
        return self.imps.get(imp, self.org)


def _compile(
    home: Home, imps: dict[str, Path] | None = None
) -> tuple[Policy, dict[str, Policy], dict[str, Fingerprint]]:
    """Org + the given overlays (default: every overlay) -> policies; PolicyError lists all."""
    violations: list[PolicyViolation] = []
    overlays = overlay_paths(home) if imps is None else imps
    org_source = read_source(home.org_policy, violations)
    sources = {ORG_KEY: fingerprint(org_source)}
    org: Policy | None = None
    if org_source.table is not None:
        org, found = validate(org_source.table, home.org_policy)
        violations.extend(found)
    effective: dict[str, Policy] = {}
    for imp, path in overlays.items():
        source = read_source(path, violations)
        sources[_relative(home, path)] = fingerprint(source)
        bad_name = check_overlay_name(imp, path)
        if bad_name is not None:
            violations.append(bad_name)
        if source.table is None:
            continue
        if org is None or org_source.table is None:
            # Tighten-only rules need a valid org; the overlay's own faults (a bad value, an
            # unknown key) are still listed now, not one deploy after the org is fixed.
            violations.extend(validate(source.table, path)[1])
            continue
        policy, found = apply_overlay(org_source.table, org, source.table, path)
        violations.extend(found)
        if policy is not None:
            effective[imp] = policy
    if violations or org is None:
        raise PolicyError(violations)
    return org, effective, sources


def runtime_violations(home: Home, org: Policy, imps: dict[str, Policy]) -> list[PolicyViolation]:
    """A violation for each policy whose box runtime the engine does not have. Only a
    policy naming runsc asks the engine; runc is every engine's."""
    wanted = {str(home.org_policy): org} | {str(home.imp_policy(i)): p for i, p in imps.items()}
    named = {path: p.box.runtime for path, p in wanted.items() if p.box.runtime != "runc"}
    if not named:
        return []
    # Imported here, not at the top: runs and status read compiled policy through this
    # module, and only a policy naming runsc needs the engine client.
    from impyard.box.docker.runtime import RUNSC_FIX, engine_runtimes

    try:
        known: list[str] | None = engine_runtimes()
        problem = ""
    except EngineError as exc:
        known, problem = None, f"cannot ask the engine for its runtimes ({exc})"
    found = []
    for path, runtime in sorted(named.items()):
        if known is not None and runtime in known:
            continue
        message = (
            problem or f"the engine has no runtime {runtime} (it has: {', '.join(known or [])})"
        )
        fix = RUNSC_FIX if runtime == "runsc" else "register it with the engine"
        found.append(
            PolicyViolation(
                path,
                "box.runtime",
                "runtime-unavailable",
                f"{message}; {fix}",
                org.box.runtime,
                runtime,
            )
        )
    return found


def deploy(home: Home) -> DeployReport:
    """Check every policy file and, only if all are valid and the engine has every box runtime
    they name, replace compiled.json atomically."""
    org, imps, sources = _compile(home)
    missing = runtime_violations(home, org, imps)
    if missing:
        raise PolicyError(missing)
    document = {
        "format": FORMAT,
        "compiled_at": utc_now(),
        "sources": sources,
        "org": org.model_dump(mode="json"),
        "imps": {imp: policy.model_dump(mode="json") for imp, policy in imps.items()},
    }
    atomic_write_json(home.compiled_policy, document)
    return DeployReport(
        compiled_path=home.compiled_policy,
        org=org,
        imps=imps,
        overlays={imp: home.imp_policy(imp) for imp in imps},
        sources=sources,
    )


def _read_compiled(home: Home) -> dict[str, Any] | None:
    try:
        return _parse_compiled(home.compiled_policy.read_bytes())
    except OSError:
        return None


def _parse_compiled(data: bytes) -> dict[str, Any] | None:
    try:
        document = json.loads(data)
    except ValueError:
        return None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        return None
    return document


def _current(home: Home, imp: str) -> dict[str, str | None]:
    """sha256 of org.toml and of the imp's overlay as they are now (None: absent/unreadable)."""
    out: dict[str, str | None] = {}
    for key, path in ((ORG_KEY, home.org_policy), (overlay_key(imp), home.imp_policy(imp))):
        try:
            out[key] = hashlib.sha256(path.read_bytes()).hexdigest()
        except OSError:
            out[key] = None
    return out


def _missing_compiled(home: Home) -> str:
    if home.compiled_policy.exists():
        return f"{home.compiled_policy} is unreadable"
    return f"{home.compiled_policy} does not exist"


def _changes(recorded: Any, current: dict[str, str | None]) -> list[str]:
    """``key changed|was added|was removed`` for each source whose sha256 differs."""
    table = recorded if isinstance(recorded, dict) else {}
    changed = []
    for key, sha in current.items():
        entry = table.get(key)
        was = entry.get("sha256") if isinstance(entry, dict) else None
        if was == sha:
            continue
        if was is None:
            changed.append(f"{key} was added")
        elif sha is None:
            changed.append(f"{key} was removed")
        else:
            changed.append(f"{key} changed")
    return changed


def stale_reason(home: Home, imp: str) -> str | None:
    """Why compiled.json does not reflect the imp's current policy files, or None if it does."""
    document = _read_compiled(home)
    if document is None:
        return _missing_compiled(home)
    changed = _changes(document.get("sources"), _current(home, imp))
    if not changed:
        return None
    return f"{', '.join(changed)} since the last deploy"


def undeployed_changes(home: Home) -> list[str]:
    """Every policy file (org.toml, any overlay, present or recorded) whose content differs
    from what compiled.json was compiled from; empty when the deployed policy is current."""
    document = _read_compiled(home)
    if document is None:
        return [_missing_compiled(home)]
    recorded = document.get("sources")
    keys = {ORG_KEY: home.org_policy}
    keys |= {_relative(home, path): path for path in overlay_paths(home).values()}
    if isinstance(recorded, dict):
        keys |= {k: home.policy_dir / k for k in recorded if k.startswith("imps/")}
    current: dict[str, str | None] = {}
    for key, path in sorted(keys.items()):
        try:
            current[key] = hashlib.sha256(path.read_bytes()).hexdigest()
        except OSError:
            current[key] = None
    return _changes(recorded, current)


def source_violations(home: Home) -> list[PolicyViolation]:
    """What ``impyard deploy`` would refuse in the policy files as they are now (the engine
    is not asked: only a deploy checks runtimes); empty when they compile."""
    try:
        _compile(home)
    except PolicyError as exc:
        return exc.violations
    return []


def compiled_at(home: Home) -> str | None:
    """When the deployed policy was compiled (None: nothing readable is deployed)."""
    document = _read_compiled(home)
    value = document.get("compiled_at") if document else None
    return value if isinstance(value, str) else None


def compiled_digest(home: Home) -> str | None:
    """sha256 of compiled.json as ``sha256sum`` prints it (None: nothing readable is
    deployed): which policy runs use, comparable across hosts and restarts."""
    try:
        data = home.compiled_policy.read_bytes()
    except OSError:
        return None
    return hashlib.sha256(data).hexdigest() if _parse_compiled(data) is not None else None


def _from_compiled(home: Home, imp: str) -> Policy | None:
    document = _read_compiled(home)
    if document is None:
        return None
    imps = document.get("imps", {})
    raw = imps.get(imp, document.get("org")) if isinstance(imps, dict) else None
    try:
        return Policy.model_validate(raw)
    except ValidationError:
        return None


def deployed_policy(home: Home, imp: str) -> Policy:
    """The imp's policy as last deployed (the org's when it has no overlay or none was)."""
    return _from_compiled(home, imp) or deployed_org_policy(home)


def deployed_org_policy(home: Home) -> Policy:
    """The org policy of the last deploy (the defaults when nothing was deployed yet)."""
    document = _read_compiled(home)
    try:
        return Policy.model_validate(document.get("org") if document else {})
    except ValidationError:
        return Policy()


def compile_imp(home: Home, imp: str) -> Policy:
    """The imp's effective policy compiled from the sources now (org + its overlay only)."""
    path = home.imp_policy(check_imp_name(imp))
    org, imps, _ = _compile(home, {imp: path} if path.exists() else {})
    return imps.get(imp, org)


def policy_for_run(home: Home, imp: str, *, strict: bool) -> tuple[Policy, list[str]]:
    """The policy a run of ``imp`` must use, and warnings to show the owner.

    Raises ConfigError when the compiled policy is stale under ``strict``, and PolicyError when
    it is stale and the sources are invalid.
    """
    reason = stale_reason(home, check_imp_name(imp))
    if reason is None:
        policy = _from_compiled(home, imp)
        if policy is not None:
            return policy, []
        reason = f"{home.compiled_policy} holds no valid policy for {imp!r}"
    if strict:
        raise ConfigError(
            f"compiled policy is stale for imp {imp!r} ({reason}) and strict_policy is on: "
            "run `impyard deploy`"
        )
    try:
        policy = compile_imp(home, imp)
    except PolicyError as exc:
        raise PolicyError(exc.violations, action=f"refusing to run imp {imp!r}") from exc
    return policy, [
        f"compiled policy is stale for imp {imp!r} ({reason}); using the policy compiled now "
        "from the sources: run `impyard deploy`"
    ]
