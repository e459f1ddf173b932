"""Obvious credentials in knowledge content: the one documented list of patterns.

A box has no credentials of its own (the gateway holds them), so a secret in a
note is either a leak through the gateway or something pasted from the web;
either way it must not become permanent, clone-able history. The list is
deliberately narrow — well-known, high-signal shapes only — so ordinary prose
about tokens ("an sk- prefix means...") is not rejected: each token pattern
requires a realistic run of key characters after its prefix.

To add a pattern, append to ``CREDENTIAL_PATTERNS`` with a short label; the
label is what a rejection message names (never the matched secret itself).
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class CredentialPattern:
    label: str
    regex: re.Pattern[str]


def _p(label: str, pattern: str, flags: int = 0) -> CredentialPattern:
    return CredentialPattern(label, re.compile(pattern, flags))


# Boundaries: a token must not be glued to a preceding word character, so
# "task-1234..." never matches "sk-".
CREDENTIAL_PATTERNS: tuple[CredentialPattern, ...] = (
    _p("private key block", r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"),
    _p(
        "Authorization: Bearer header",
        r"^\s*(?:proxy-)?authorization\s*:\s*bearer\s+\S{8,}",
        re.IGNORECASE | re.MULTILINE,
    ),
    _p("GitHub token (ghp_/gho_/ghu_/ghs_/ghr_)", r"(?<![A-Za-z0-9_])gh[pousr]_[A-Za-z0-9]{30,}"),
    _p("GitHub fine-grained token (github_pat_)", r"(?<![A-Za-z0-9_])github_pat_[A-Za-z0-9_]{30,}"),
    _p(
        "Slack token (xoxb-/xoxp-/xoxa-/xoxr-/xoxs-)",
        r"(?<![A-Za-z0-9_])xox[bpars]-[A-Za-z0-9-]{10,}",
    ),
    _p("AWS access key id (AKIA/ASIA)", r"(?<![A-Z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Z0-9])"),
    _p("OpenAI/Anthropic-style secret key (sk-)", r"(?<![A-Za-z0-9_-])sk-[A-Za-z0-9_-]{20,}"),
    _p("Google API key (AIza)", r"(?<![A-Za-z0-9_])AIza[0-9A-Za-z_-]{35}"),
    _p("GitLab token (glpat-)", r"(?<![A-Za-z0-9_])glpat-[A-Za-z0-9_-]{20,}"),
    _p("Stripe live key (sk_live_/rk_live_)", r"(?<![A-Za-z0-9_])[rs]k_live_[A-Za-z0-9]{20,}"),
)


def find_credentials(text: str) -> list[str]:
    """Labels of every credential pattern present in ``text`` (never the secret itself)."""
    return [p.label for p in CREDENTIAL_PATTERNS if p.regex.search(text)]
