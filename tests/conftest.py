"""Shared fixtures and hygiene for every test.

- ``docker`` tests need a real engine. Locally they skip without one; under
  ``CI=true`` a missing engine is a failure, never a skip.
- A test may not leak environment variables or containers.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

BOX_IMAGE = os.environ.get("IMPYARD_TEST_IMAGE", "impyard-box:latest")


def _engine_problem() -> str | None:
    try:
        import docker

        client = docker.from_env(timeout=10)
        try:
            client.ping()
            client.images.get(BOX_IMAGE)
        finally:
            client.close()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


@pytest.fixture(scope="session")
def docker_engine() -> None:
    problem = _engine_problem()
    if problem is None:
        return
    message = f"docker engine or {BOX_IMAGE} unavailable ({problem}); run `just engine box`"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


PI_IMAGE = os.environ.get("IMPYARD_TEST_PI_IMAGE", "impyard-pi:latest")


@pytest.fixture(scope="session")
def pi_image(docker_engine: None) -> str:
    """The real Pi agent image (scripts/build-agent-box.sh); CI builds it, never skips it."""
    import docker

    client = docker.from_env(timeout=10)
    try:
        client.images.get(PI_IMAGE)
    except Exception as exc:
        message = f"{PI_IMAGE} unavailable ({type(exc).__name__}); run `just box-pi`"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    finally:
        client.close()
    return PI_IMAGE


@pytest.fixture(autouse=True, scope="session")
def _unsynced_git_objects() -> Iterator[None]:
    """In-process git writes skip libgit2's per-object fsync (on in the product).

    Durability cannot be observed without a power cut, and the fixtures write
    thousands of objects; the CLI tests run ``impyard`` as a subprocess, with it on.
    """
    import pygit2

    import impyard.knowledge.repo  # noqa: F401  (it turns the option on when imported)

    pygit2.settings.enable_fsync_gitdir(False)
    yield
    pygit2.settings.enable_fsync_gitdir(True)


def _impyard_containers() -> set[str]:
    import docker

    client = docker.from_env(timeout=10)
    try:
        # The low-level listing: no per-container inspect that races with removal.
        found = client.api.containers(all=True, filters={"label": "impyard.run"})
        return {c["Id"] for c in found}
    finally:
        client.close()


@pytest.fixture(autouse=True)
def _hygiene(request: pytest.FixtureRequest) -> Iterator[None]:
    before_env = dict(os.environ)
    is_docker = request.node.get_closest_marker("docker") is not None
    if is_docker:
        request.getfixturevalue("docker_engine")
        before_containers = _impyard_containers()
    yield
    ignored = {"PYTEST_CURRENT_TEST"}
    leaked_env = {
        k
        for k in set(os.environ) | set(before_env)
        if k not in ignored and os.environ.get(k) != before_env.get(k)
    }
    assert not leaked_env, f"test leaked environment variables: {sorted(leaked_env)}"
    if is_docker:
        leaked = _impyard_containers() - before_containers
        assert not leaked, f"test leaked containers: {sorted(leaked)}"


GIT_ENV = {
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_AUTHOR_NAME": "Test",
    "GIT_AUTHOR_EMAIL": "test@example.invalid",
    "GIT_COMMITTER_NAME": "Test",
    "GIT_COMMITTER_EMAIL": "test@example.invalid",
}


def git(*args: str | Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    """The git CLI as an independent checker of what the host wrote."""
    env = {**os.environ, **GIT_ENV}
    return subprocess.run(
        ["git", *map(str, args)], capture_output=True, text=True, env=env, check=check
    )


@dataclass
class CliResult:
    code: int
    stdout: str
    stderr: str


@dataclass
class Cli:
    """Drives the real ``impyard`` CLI in a subprocess against one data root."""

    home: Path

    def __call__(
        self,
        *args: str,
        env: dict[str, str] | None = None,
        timeout: float = 120,
        input: str | None = None,
    ) -> CliResult:
        full_env = {**os.environ, **GIT_ENV, **(env or {})}
        full_env.pop("IMPYARD_HOME", None)
        proc = subprocess.run(
            [sys.executable, "-m", "impyard", "--home", str(self.home), *args],
            capture_output=True,
            text=True,
            env=full_env,
            timeout=timeout,
            input=input,
        )
        return CliResult(proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    return Cli(home=tmp_path / "home")
