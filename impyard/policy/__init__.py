"""Owner policy: typed models, tighten-only per-imp overlays, and the compiled policy runs use."""

from __future__ import annotations

from impyard.policy.compile import (
    DeployReport,
    compile_imp,
    deploy,
    policy_for_run,
    stale_reason,
)
from impyard.policy.models import (
    BoxPolicy,
    EffectivePolicy,
    GatewayAllow,
    GatewayBudget,
    GatewayPolicy,
    GatewayRoute,
    KnowledgePolicy,
    Policy,
)
from impyard.policy.show import ShownPolicy, SourcedValue, effective_policy_with_sources
from impyard.policy.violation import PolicyError, PolicyViolation

__all__ = [
    "BoxPolicy",
    "DeployReport",
    "EffectivePolicy",
    "GatewayAllow",
    "GatewayBudget",
    "GatewayPolicy",
    "GatewayRoute",
    "KnowledgePolicy",
    "Policy",
    "PolicyError",
    "PolicyViolation",
    "ShownPolicy",
    "SourcedValue",
    "compile_imp",
    "deploy",
    "effective_policy_with_sources",
    "policy_for_run",
    "stale_reason",
]
