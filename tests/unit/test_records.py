"""Record names, frontmatter and the credential list."""

from __future__ import annotations

import pytest

from impyard.credentials import CREDENTIAL_PATTERNS, find_credentials
from impyard.knowledge.validation.records import (
    claimed_namespace,
    frontmatter_errors,
    parse_frontmatter,
    parse_record_path,
)
from tests.helpers.repo import NS, note_text


def test_a_valid_record_path_parses() -> None:
    name = parse_record_path(f"records/vendors/acme-sso--{NS}_12.md")
    assert name is not None
    assert (name.topic, name.slug, name.namespace, name.number) == ("vendors", "acme-sso", NS, 12)
    assert name.note_id == f"{NS}_12"


@pytest.mark.parametrize(
    "path",
    [
        f"records/vendors/acme--{NS}_01.md",  # leading zero
        f"records/vendors/acme--{NS}_0.md",
        f"records/Vendors/acme--{NS}_1.md",  # uppercase
        f"records/vendors/Acme--{NS}_1.md",
        f"records/a/b/acme--{NS}_1.md",  # nested topic
        f"records/acme--{NS}_1.md",  # no topic
        f"records/vendors/acme--{NS}_1.txt",
        f"records/vendors/acme_x--{NS}_1.md",
        f"records/vendors/--{NS}_1.md",
        "records/vendors/acme--n_XYZ_1.md",
        f"organization/vendors/acme--{NS}_1.md",
    ],
)
def test_invalid_record_paths_do_not_parse(path: str) -> None:
    assert parse_record_path(path) is None


def test_claimed_namespace_spots_foreign_names() -> None:
    assert claimed_namespace("records/a/b--n_0123456789ab_1.md") == "n_0123456789ab"
    assert claimed_namespace("records/a/plain.md") is None


def test_frontmatter_parses_the_documented_subset() -> None:
    front = parse_frontmatter(note_text(f"{NS}_1", urls=["https://a.example/x", "http://b"]))
    assert front.errors == []
    assert front.fields["id"] == f"{NS}_1"
    assert front.fields["source_urls"] == ["https://a.example/x", "http://b"]


def test_valid_frontmatter_has_no_errors() -> None:
    assert frontmatter_errors(note_text(f"{NS}_1"), f"{NS}_1") == ([], False)
    assert frontmatter_errors(note_text(f"{NS}_1", urls=[]), f"{NS}_1") == ([], False)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("no frontmatter\n", "must start with"),
        ("---\nid: x\n", "not closed"),
        (note_text("n_0123456789ab_1"), "must equal"),
        (note_text(f"{NS}_1", created_at="2026-07-11 12:00"), "not an ISO-8601 UTC"),
        (note_text(f"{NS}_1", created_at="2026-07-11T12:00:00+02:00"), "not an ISO-8601 UTC"),
        (note_text(f"{NS}_1", created_at="2026-13-40T12:00:00Z"), "not an ISO-8601 UTC"),
        (note_text(f"{NS}_1", urls=["ftp://x/y"]), "not an http(s) URL"),
        (note_text(f"{NS}_1", urls=["file:///etc/passwd"]), "not an http(s) URL"),
        (f"---\nid: {NS}_1\n---\n", "created_at' is missing"),
        ("---\ncreated_at: 2026-07-11T12:00:00Z\n---\n", "'id' is missing"),
        (f"---\nid: {NS}_1\nid: {NS}_1\ncreated_at: 2026-07-11T12:00:00Z\n---\n", "twice"),
        (
            f"---\nid: {NS}_1\ncreated_at: 2026-07-11T12:00:00Z\nsource_urls: https://x\n---\n",
            "must be a list",
        ),
    ],
)
def test_bad_frontmatter_is_explained(text: str, fragment: str) -> None:
    errors, _ = frontmatter_errors(text, f"{NS}_1")
    assert any(fragment in e for e in errors), errors


@pytest.mark.parametrize("bad_id", ["../../etc/passwd", "a/b", f"{NS}_1/..", "..\\x"])
def test_an_id_with_path_syntax_is_an_escape(bad_id: str) -> None:
    _, escape = frontmatter_errors(note_text(bad_id), f"{NS}_1")
    assert escape


@pytest.mark.parametrize(
    "secret",
    [
        "-----BEGIN RSA PRIVATE KEY-----\nMIIE\n",
        "-----BEGIN OPENSSH PRIVATE KEY-----",
        "-----BEGIN PRIVATE KEY-----",
        "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.x",
        "  authorization:bearer abcdefgh12345",
        "token ghp_" + "a" * 36,
        "github_pat_" + "A1_" * 12,
        "xoxb-123456789012-abcdef",
        "xoxp-123456789012-abcdef",
        "key AKIAIOSFODNN7EXAMPLE here",
        "sk-" + "a1B2" * 8,
        "sk-proj-" + "x" * 30,
        "AIza" + "b" * 35,
        "glpat-" + "c" * 20,
        "sk_live_" + "d" * 24,
    ],
)
def test_credentials_are_found(secret: str) -> None:
    assert find_credentials(f"note\n{secret}\nmore") != []


@pytest.mark.parametrize(
    "text",
    [
        "The sk- prefix marks OpenAI keys.",
        "task-abcdefghijklmnopqrstuvwxyz",
        "Use an Authorization: Bearer header with your token.",
        "AKIA followed by sixteen characters",
        "xoxb- tokens are Slack bot tokens",
        "risk-assessment-framework-for-vendors-2026",
    ],
)
def test_prose_about_credentials_is_not_a_credential(text: str) -> None:
    assert find_credentials(text) == []


def test_every_pattern_has_a_label() -> None:
    assert all(p.label for p in CREDENTIAL_PATTERNS)
    assert len({p.label for p in CREDENTIAL_PATTERNS}) == len(CREDENTIAL_PATTERNS)
