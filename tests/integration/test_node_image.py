"""The node agent's image (scripts/build-node-image.sh, run by bootstrap): Impyard from this
tree in a venv at /opt/impyard, answering offline on a read-only root, with nothing of the
build host in it (no checkout, no tests, no host path)."""

from __future__ import annotations

import fcntl
import io
import os
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.images import NODE_IMAGE

pytestmark = [pytest.mark.docker, pytest.mark.timeout(1200)]

TOP = Path(__file__).resolve().parents[2]
VENV = "/opt/impyard"


@pytest.fixture(scope="module")
def client() -> Iterator[Any]:
    import docker

    client = docker.from_env(timeout=120)
    yield client
    client.close()


@pytest.fixture(scope="module")
def node_image(client: Any) -> str:
    """The image bootstrap builds; built here with the script when it is missing (one build
    at a time across test workers: the script is idempotent, a second one finds it current)."""
    import docker

    with open(Path(os.environ.get("TMPDIR", "/tmp")) / "impyard-node-image.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            client.images.get(NODE_IMAGE)
        except docker.errors.ImageNotFound:
            built = subprocess.run(
                ["bash", str(TOP / "scripts/build-node-image.sh"), NODE_IMAGE],
                env={**os.environ, "IMPYARD_PYTHON": sys.executable},
                capture_output=True,
                text=True,
            )
            assert built.returncode == 0, built.stdout + built.stderr
    return NODE_IMAGE


def offline(client: Any, image: str, argv: list[str], entrypoint: str | None = None) -> str:
    """``argv`` in ``image`` as root with no network and a read-only root: its stdout."""
    output = client.containers.run(
        image,
        argv,
        entrypoint=entrypoint,
        network_mode="none",
        read_only=True,
        user="0",
        remove=True,
        stderr=False,
    )
    return bytes(output).decode()


def host_version() -> str:
    done = subprocess.run(
        [sys.executable, "-m", "impyard", "--version"], capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def test_the_node_image_runs_this_trees_impyard_offline_on_a_read_only_root(
    client: Any, node_image: str
) -> None:
    assert offline(client, node_image, ["--version"]).strip() == host_version()
    helped = offline(client, node_image, ["--help"])
    assert "node" in helped.split()  # the command the image runs by default
    config = client.images.get(node_image).attrs["Config"]
    assert config["Entrypoint"] == [f"{VENV}/bin/impyard"] and config["Cmd"] == ["node"]
    assert config["User"] in ("0", "0:0", "root")


def test_impyard_runs_from_a_venv_at_opt_impyard(client: Any, node_image: str) -> None:
    probe = "import impyard, sys; print(sys.prefix, sys.base_prefix, impyard.__file__)"
    prefix, base, module = offline(
        client, node_image, ["-c", probe], entrypoint=f"{VENV}/bin/python"
    ).split()
    assert prefix == VENV and base == "/usr"  # a venv over Debian's python3
    assert module == f"{VENV}/lib/python3.11/site-packages/impyard/__init__.py"


def test_the_node_image_holds_no_checkout_no_tests_and_no_host_path(
    client: Any, node_image: str
) -> None:
    host_paths = sorted({str(TOP), sys.prefix, sys.base_prefix}, key=len, reverse=True)
    names: list[str] = []
    holding: dict[str, list[str]] = {}
    container = client.containers.create(node_image, network_disabled=True)
    try:
        stream = io.BufferedReader(_ChunkReader(container.export()), buffer_size=1 << 20)
        with tarfile.open(fileobj=stream, mode="r|") as tar:
            for member in tar:
                names.append(member.name)
                if not member.isfile():
                    continue
                data = tar.extractfile(member)
                content = data.read() if data is not None else b""
                for path in host_paths:
                    if path.encode() in content:
                        holding.setdefault(path, []).append(member.name)
    finally:
        container.remove(force=True)

    assert f"{VENV.lstrip('/')}/bin/impyard" in names
    found = {
        ".git": [n for n in names if ".git" in Path(n).parts],
        "tests": [n for n in names if "tests" in Path(n).parts],
        "named after a host path": [
            n for n in names if any(p.lstrip("/") in n for p in host_paths) or ".pyenv" in n
        ],
        "holding a host path": holding,
    }
    assert {what: where for what, where in found.items() if where} == {}


class _ChunkReader(io.RawIOBase):
    """The engine's export stream (chunks of bytes) as a file ``tarfile`` reads."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks = chunks
        self._left = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._left:
            try:
                self._left = next(self._chunks)
            except StopIteration:
                return 0
        size = min(len(buffer), len(self._left))
        buffer[:size] = self._left[:size]
        self._left = self._left[size:]
        return size
