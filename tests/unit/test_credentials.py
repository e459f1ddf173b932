"""Credential shapes: each labelled or prefixed secret is found, prose about it is not."""

from __future__ import annotations

import pytest

from impyard.credentials import CREDENTIAL_PATTERNS, find_credentials

AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"  # 40 characters
AZURE_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)
assert len(AWS_SECRET) == 40 and len(AZURE_KEY) == 88


@pytest.mark.parametrize(
    ("text", "label"),
    [
        (f"aws_secret_access_key = {AWS_SECRET}", "AWS secret access key"),
        (f"AWS_SECRET_ACCESS_KEY={AWS_SECRET}", "AWS secret access key"),
        (f'export AWS_SECRET_ACCESS_KEY="{AWS_SECRET}"', "AWS secret access key"),
        (f'{{"SecretAccessKey": "{AWS_SECRET}", "SessionToken": "x"}}', "AWS secret access key"),
        (f"aws_secret_access_key: '{AWS_SECRET}'", "AWS secret access key"),
        (
            "DefaultEndpointsProtocol=https;AccountName=acme;"
            f"AccountKey={AZURE_KEY};EndpointSuffix=core.windows.net",
            "Azure storage account key",
        ),
        (
            "Endpoint=sb://acme.servicebus.windows.net/;SharedAccessKeyName=root;"
            "SharedAccessKey=" + "k" * 43 + "=",
            "Azure shared access key",
        ),
        ('"private_key": "-----BEGIN PRIVATE KEY-----\\nMIIEvQIBADANBgkqhkiG9w0B', "private key"),
        ("key=AIzaSyD" + "x" * 32, "Google API key"),
        ("client_secret: GOCSPX-" + "a1B2c3D4e5" * 3, "Google OAuth client secret"),
        ("xoxe-1-" + "A1b2" * 8, "Slack token"),
        ("xoxe.xoxp-1-" + "A1b2" * 8, "Slack token"),
        ("xapp-1-A0123456789-" + "1" * 13 + "-" + "ab" * 20, "Slack app token"),
        (
            "https://hooks.slack.com/services/T0123ABCD/B0456EFGH/" + "aBcD1234" * 3,
            "Slack webhook URL",
        ),
        ("STRIPE_KEY=sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc", "Stripe live key"),
        ("rk_live_" + "4eC39HqLyjWDarjtT1zdp7dc", "Stripe live key"),
        ("glpat-" + "xYz1_AbC2-dEf3GhI4jK", "GitLab token"),
        ("//registry.npmjs.org/:_authToken=npm_" + "a1B2c3D4e5F6" * 3, "npm token"),
        ("password = pypi-AgEIcHlwaS5vcmc" + "CJDk4ZTIyYzJmLTk" * 5, "PyPI token"),
        ("HF_TOKEN=hf_" + "aBcDeFgHiJkLmNoPqRsTuVwXyZaBcDeFgH", "Hugging Face token"),
        ("SG." + "a" * 22 + "." + "B" * 43, "SendGrid API key"),
        ("TWILIO_AUTH_TOKEN=" + "0123456789abcdef" * 2, "Twilio auth token"),
        ('"twilio_api_secret": "' + "0123456789abcdef" * 2 + '"', "Twilio auth token"),
    ],
)
def test_secret_shapes_are_found_and_named(text: str, label: str) -> None:
    labels = find_credentials(f"note\n{text}\nmore")
    assert any(label in found for found in labels), labels


@pytest.mark.parametrize(
    "text",
    [
        "Set aws_secret_access_key = <your secret key> in ~/.aws/credentials.",
        "The AWS_SECRET_ACCESS_KEY variable holds a 40-character secret.",
        "aws_secret_access_key = YOUR_SECRET_ACCESS_KEY_GOES_HERE_PLEASE",
        "Copy the AccountKey=... part of the storage connection string.",
        "SharedAccessKey=<key> comes from the portal.",
        "Browser keys start with AIza and are 39 characters long.",
        "OAuth client secrets now start with GOCSPX- followed by random text.",
        "xoxe- tokens refresh Slack tokens; xapp- tokens are app-level tokens.",
        "Post to https://hooks.slack.com/services/... to notify the channel.",
        "Live keys begin sk_live_ and test keys sk_test_.",
        "glpat- is the GitLab personal access token prefix.",
        "npm_config_registry and npm_package_version are set by npm run.",
        "PyPI tokens start with pypi-AgEIcHlwaS5vcmc and are long.",
        "Use hf_hub_download from huggingface_hub; the hf_transfer extra is faster.",
        "SendGrid keys look like SG.xxxx.yyyy.",
        "TWILIO_AUTH_TOKEN=your_auth_token (32 hex characters).",
        "An account SID starts with AC and an API key SID with SK.",
        "The private_key field of a service-account JSON file must never be shared.",
    ],
)
def test_prose_about_these_secrets_is_not_a_credential(text: str) -> None:
    assert find_credentials(text) == []


def test_a_label_never_contains_the_secret() -> None:
    text = f"aws_secret_access_key = {AWS_SECRET}\nAccountKey={AZURE_KEY}"
    labels = find_credentials(text)
    assert len(labels) == 2
    assert all(AWS_SECRET not in label and AZURE_KEY[:20] not in label for label in labels)


def test_every_pattern_is_gated_by_a_literal_every_match_contains() -> None:
    """The needles only skip regexes that cannot match; a needle must be lowercase (the
    text is lowered for the check) and, for a fixed prefix, part of every match."""
    for pattern in CREDENTIAL_PATTERNS:
        assert pattern.needles, pattern.label
        assert all(needle == needle.lower() for needle in pattern.needles), pattern.label
