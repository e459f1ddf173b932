"""Which box images this data root needs: the deployed policies' and the imps' own."""

from __future__ import annotations

from impyard.common.errors import ImpyardError
from impyard.home import Home
from impyard.knowledge.imps import read_imp_settings
from impyard.policy.compile import deployed_org_policy, deployed_policy


def named_images(home: Home, imps: list[str]) -> dict[str, list[str]]:
    """Image -> who names it. The org policy's image counts even when no imp uses it yet:
    it is what the next ``imp create`` gets."""
    named: dict[str, list[str]] = {deployed_org_policy(home).box.image: ["org policy"]}
    for imp in imps:
        try:
            own = read_imp_settings(home, imp).image
        except ImpyardError:
            own = None  # an unreadable imp.json shows in the knowledge section
        image = own or deployed_policy(home, imp).box.image
        named.setdefault(image, []).append(f"imp {imp}")
    return named
