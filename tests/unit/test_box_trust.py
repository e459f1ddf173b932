"""box.extra_ca_file: only certificates reach a run, and a bad file fails before the box."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from impyard.box.trust import MAX_CA_FILE_BYTES, certificates_of, copy_extra_ca, extra_ca_env
from impyard.errors import ConfigError
from tests.tls_server import make_ca_and_leaf


@pytest.fixture
def pems(tmp_path: Path) -> tuple[Path, Path, Path]:
    return make_ca_and_leaf(tmp_path / "pki")


def test_only_certificate_blocks_are_copied(tmp_path: Path, pems: tuple[Path, Path, Path]) -> None:
    ca, _leaf, key = pems
    mixed = tmp_path / "owner.pem"
    mixed.write_text("# internal CA\n" + ca.read_text() + key.read_text())
    copied = tmp_path / "run" / "ca.pem"
    copied.parent.mkdir()
    copy_extra_ca(mixed, copied)
    text = copied.read_text()
    assert text == ca.read_text()
    assert "PRIVATE KEY" not in text
    assert copied.stat().st_mode & 0o777 == 0o644
    ssl.create_default_context(cafile=str(copied))  # a bundle TLS stacks accept


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read it"),
        (b"just text\n", "no PEM certificate"),
        (
            b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
            "does not parse",
        ),
        (b"x" * (MAX_CA_FILE_BYTES + 1), "larger than"),
    ],
)
def test_bad_files_name_the_key_and_the_problem(
    tmp_path: Path, content: bytes | None, message: str
) -> None:
    path = tmp_path / "ca.pem"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(ConfigError) as raised:
        certificates_of(path)
    assert str(raised.value).startswith(f"box.extra_ca_file {path}: ")
    assert message in str(raised.value)


def test_the_box_environment_points_every_tls_stack_at_the_merged_bundle() -> None:
    env = extra_ca_env()
    bundle = env["SSL_CERT_FILE"]
    assert bundle.startswith("/tmp/")  # written by box-init on the tmpfs
    assert env["CURL_CA_BUNDLE"] == env["REQUESTS_CA_BUNDLE"] == bundle
    assert env["NODE_EXTRA_CA_CERTS"] == env["IMPYARD_EXTRA_CA"] == "/opt/impyard/ca.pem"
