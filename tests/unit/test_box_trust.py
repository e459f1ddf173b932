"""What a box trusts: one host-built bundle; from box.extra_ca_file only certificates reach
it, a bad file fails before the box, and the inspection CA's key never does."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from impyard.box.images.trust import (
    BOX_CA_BUNDLE,
    MAX_CA_FILE_BYTES,
    bundle_env,
    certificates_of,
    write_box_bundle,
)
from impyard.common.errors import ConfigError
from impyard.gateway.wiring.ca import ca_certificate, ensure_ca
from tests.tls_server import make_ca_and_leaf


@pytest.fixture
def pems(tmp_path: Path) -> tuple[Path, Path, Path]:
    return make_ca_and_leaf(tmp_path / "pki")


def test_the_bundle_is_image_roots_inspection_ca_and_only_the_owners_certificates(
    tmp_path: Path, pems: tuple[Path, Path, Path]
) -> None:
    ca, _leaf, key = pems
    mixed = tmp_path / "owner.pem"
    mixed.write_text("# internal CA\n" + ca.read_text() + key.read_text())
    image_ca, _image_leaf, _image_key = make_ca_and_leaf(tmp_path / "image")
    inspection = ca_certificate(tmp_path / "gateway-ca")
    bundle = tmp_path / "run" / "ca-bundle.pem"
    bundle.parent.mkdir()
    assert write_box_bundle(
        bundle, image_ca.read_text(), inspection_ca=inspection, extra_ca_file=mixed
    )
    text = bundle.read_text()
    assert text.index(image_ca.read_text().strip()) < text.index(inspection.strip())
    assert text.index(inspection.strip()) < text.index(ca.read_text().strip())
    assert "PRIVATE KEY" not in text
    assert bundle.stat().st_mode & 0o777 == 0o644
    context = ssl.create_default_context(cafile=str(bundle))  # a bundle TLS stacks accept
    assert len(context.get_ca_certs()) == 3


def test_no_bundle_when_the_box_trusts_only_its_image(tmp_path: Path) -> None:
    bundle = tmp_path / "ca-bundle.pem"
    assert not write_box_bundle(bundle, "", inspection_ca=None, extra_ca_file=None)
    assert not bundle.exists()


def test_the_inspection_ca_key_is_the_host_users_alone(tmp_path: Path) -> None:
    files = ensure_ca(tmp_path / "ca")
    assert files.key.stat().st_mode & 0o777 == 0o600
    assert files.directory.stat().st_mode & 0o777 == 0o700
    assert "PRIVATE KEY" not in ca_certificate(files.directory)
    assert ensure_ca(files.directory).key.read_bytes() == files.key.read_bytes()  # kept


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


def test_the_box_environment_points_every_tls_stack_at_the_bundle() -> None:
    env = bundle_env()
    assert set(env) == {
        "SSL_CERT_FILE",
        "CURL_CA_BUNDLE",
        "REQUESTS_CA_BUNDLE",
        "NODE_EXTRA_CA_CERTS",
        "GIT_SSL_CAINFO",
        "PIP_CERT",
        "npm_config_cafile",
    }
    assert set(env.values()) == {BOX_CA_BUNDLE}


def test_runs_share_one_written_bundle_per_content(
    tmp_path: Path, pems: tuple[Path, Path, Path]
) -> None:
    ca, _leaf, _key = pems
    shared = tmp_path / "bundles"
    runs = [tmp_path / f"run{i}" / "ca-bundle.pem" for i in range(3)]
    for run in runs:
        run.parent.mkdir()
    inspection = ca_certificate(tmp_path / "gateway-ca")
    for run in runs[:2]:
        write_box_bundle(run, "", inspection_ca=inspection, extra_ca_file=None, shared_dir=shared)
    # Another CA in the bundle is another shared file; a run's own copy never changes.
    write_box_bundle(runs[2], "", inspection_ca=inspection, extra_ca_file=ca, shared_dir=shared)
    assert runs[0].stat().st_ino == runs[1].stat().st_ino != runs[2].stat().st_ino
    assert len(list(shared.iterdir())) == 2
    assert runs[0].read_text().strip() == inspection.strip()
    assert ca.read_text().strip() in runs[2].read_text()
    assert all(run.stat().st_mode & 0o777 == 0o644 for run in runs)
