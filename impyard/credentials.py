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
    #: Lowercase literals one of which every match contains: a pattern whose needles are
    #: all absent is not run. Python's regex engine cannot skip ahead to a literal that
    #: follows a lookbehind, so without this each pattern tried every position of every
    #: file (~0.2 s per pattern for 30,000 notes).
    needles: tuple[str, ...]


def _p(label: str, pattern: str, *needles: str, flags: int = 0) -> CredentialPattern:
    return CredentialPattern(label, re.compile(pattern, flags), needles)


# Boundaries: a token must not be glued to a preceding word character, so
# "task-1234..." never matches "sk-". Secrets with no distinctive prefix (AWS and
# Twilio secrets, Azure keys) count only next to their label and with their exact
# length and alphabet, so prose that names the label is never one.
_AFTER_LABEL = r"[\"']?\s*[:=]>?\s*[\"']?"  # key = v, key: 'v', "Key": "v", :key => 'v'

CREDENTIAL_PATTERNS: tuple[CredentialPattern, ...] = (
    # Also the "private_key" of a GCP service-account JSON file.
    _p(
        "private key block", r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----", "private key"
    ),
    _p(
        "Authorization: Bearer header",
        r"^\s*(?:proxy-)?authorization\s*:\s*bearer\s+\S{8,}",
        "bearer",
        flags=re.IGNORECASE | re.MULTILINE,
    ),
    _p(
        "GitHub token (ghp_/gho_/ghu_/ghs_/ghr_)",
        r"(?<![A-Za-z0-9_])gh[pousr]_[A-Za-z0-9]{30,}",
        "ghp_",
        "gho_",
        "ghu_",
        "ghs_",
        "ghr_",
    ),
    _p(
        "GitHub fine-grained token (github_pat_)",
        r"(?<![A-Za-z0-9_])github_pat_[A-Za-z0-9_]{30,}",
        "github_pat_",
    ),
    _p(
        "Slack token (xoxb-/xoxp-/xoxa-/xoxr-/xoxs-/xoxe-)",
        r"(?<![A-Za-z0-9_])xox[bparse]-[A-Za-z0-9-]{10,}",
        "xox",
    ),
    _p("Slack app token (xapp-)", r"(?<![A-Za-z0-9_])xapp-[0-9]+-[A-Za-z0-9-]{20,}", "xapp-"),
    _p(
        "Slack webhook URL (hooks.slack.com/services/)",
        r"hooks\.slack\.com/services/T[A-Z0-9]{6,}/B[A-Z0-9]{6,}/[A-Za-z0-9]{20,}",
        "hooks.slack.com",
    ),
    _p(
        "AWS access key id (AKIA/ASIA)",
        r"(?<![A-Z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Z0-9])",
        "akia",
        "asia",
    ),
    _p(
        "AWS secret access key (aws_secret_access_key / SecretAccessKey)",
        # S3-compatible stores use the same label for the same kind of secret.
        rf"secret[_-]?access[_-]?key{_AFTER_LABEL}[A-Za-z0-9/+]{{40}}(?![A-Za-z0-9/+=])",
        "secret",
        flags=re.IGNORECASE,
    ),
    _p(
        "Azure storage account key (AccountKey=)",
        r"AccountKey\s*=\s*[A-Za-z0-9+/]{86}==",
        "accountkey",
        flags=re.IGNORECASE,
    ),
    _p(
        "Azure shared access key (SharedAccessKey=)",
        r"SharedAccessKey\s*=\s*[A-Za-z0-9+/]{43}=",
        "sharedaccesskey",
        flags=re.IGNORECASE,
    ),
    _p(
        "OpenAI/Anthropic-style secret key (sk-)", r"(?<![A-Za-z0-9_-])sk-[A-Za-z0-9_-]{20,}", "sk-"
    ),
    _p("Google API key (AIza)", r"(?<![A-Za-z0-9_])AIza[0-9A-Za-z_-]{35}", "aiza"),
    _p(
        "Google OAuth client secret (GOCSPX-)",
        r"(?<![A-Za-z0-9_])GOCSPX-[A-Za-z0-9_-]{28}",
        "gocspx-",
    ),
    _p("GitLab token (glpat-)", r"(?<![A-Za-z0-9_])glpat-[A-Za-z0-9_-]{20,}", "glpat-"),
    _p(
        "Stripe live key (sk_live_/rk_live_)",
        r"(?<![A-Za-z0-9_])[rs]k_live_[A-Za-z0-9]{20,}",
        "k_live_",
    ),
    _p("npm token (npm_)", r"(?<![A-Za-z0-9_])npm_[A-Za-z0-9]{36}(?![A-Za-z0-9])", "npm_"),
    _p(
        "PyPI token (pypi-)",
        r"(?<![A-Za-z0-9_])pypi-(?:AgEIcHlwaS5vcmc|AgENdGVzdC5weXBpLm9yZw)[A-Za-z0-9_-]{50,}",
        "pypi-",
    ),
    _p("Hugging Face token (hf_)", r"(?<![A-Za-z0-9_])hf_[A-Za-z0-9]{34,}(?![A-Za-z0-9_])", "hf_"),
    _p(
        "SendGrid API key (SG.)",
        r"(?<![A-Za-z0-9_])SG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}(?![A-Za-z0-9_-])",
        "sg.",
    ),
    _p(
        "Twilio auth token (labelled)",
        rf"twilio[_-]?(?:auth[_-]?token|api[_-]?secret){_AFTER_LABEL}[0-9a-f]{{32}}(?![0-9a-z])",
        "twilio",
        flags=re.IGNORECASE,
    ),
)


def find_credentials(text: str) -> list[str]:
    """Labels of every credential pattern present in ``text`` (never the secret itself)."""
    lowered = text.lower()
    return [
        p.label
        for p in CREDENTIAL_PATTERNS
        if any(needle in lowered for needle in p.needles) and p.regex.search(text)
    ]
