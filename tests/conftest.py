"""Shared fixtures and hygiene for every test.

- ``docker`` tests need a real engine. Locally they skip without one; under
  ``CI=true`` a missing engine is a failure, never a skip.
- A test may not leak environment variables, containers or mounts. Docker tests run in
  parallel on one engine, so a test counts only the boxes whose run lives under its own
  ``tmp_path``: another test's boxes are neither its leak nor its business.
- ``cli`` runs the CLI in this process for unit tests and as ``python -m impyard`` for
  docker and integration tests.

Helpers live in ``tests.helpers``; the names re-exported below keep older imports from
``tests.conftest`` working.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.cli import Cli
from tests.helpers.images import (
    BOX_IMAGE,
    CLAUDE_CODE_IMAGE,
    CODEX_IMAGE,
    GEMINI_IMAGE,
    OPENCODE_IMAGE,
    PI_IMAGE,
)
from tests.helpers.mounts import mounts_under, unmount_all
from tests.helpers.runtime import TEST_RUNTIME
from tests.helpers.upstream import Upstream

INTEGRATION = Path(__file__).resolve().parent / "integration"


def _engine_problem() -> str | None:
    try:
        import docker

        client = docker.from_env(timeout=10)
        try:
            client.ping()
            client.images.get(BOX_IMAGE)
            runtimes = client.info().get("Runtimes") or {}
            if TEST_RUNTIME not in runtimes:
                return f"the engine has no runtime {TEST_RUNTIME} (run `bash scripts/gvisor.sh`)"
        finally:
            client.close()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def pytest_report_header() -> str:
    return f"box runtime: {TEST_RUNTIME} (IMPYARD_INIT_RUNTIME)"


@pytest.fixture(scope="session")
def docker_engine() -> None:
    problem = _engine_problem()
    if problem is None:
        return
    message = f"docker engine or {BOX_IMAGE} unavailable ({problem}); run `just engine box`"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def _agent_image(image: str, recipe: str) -> str:
    """``image`` when the engine has it; else a skip (a failure in CI) naming ``recipe``."""
    import docker

    client = docker.from_env(timeout=10)
    try:
        client.images.get(image)
    except Exception as exc:
        message = f"{image} unavailable ({type(exc).__name__}); run `{recipe}`"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    finally:
        client.close()
    return image


@pytest.fixture(scope="session")
def pi_image(docker_engine: None) -> str:
    """The real Pi agent image (scripts/build-agent-box.sh); CI builds it, never skips it."""
    return _agent_image(PI_IMAGE, "just box-pi")


@pytest.fixture(scope="session")
def claude_code_image(docker_engine: None) -> str:
    """The real Claude Code agent image; CI builds it, never skips it."""
    return _agent_image(CLAUDE_CODE_IMAGE, "just box-claude-code")


@pytest.fixture(scope="session")
def codex_image(docker_engine: None) -> str:
    """The real Codex agent image; CI builds it, never skips it."""
    return _agent_image(CODEX_IMAGE, "just box-codex")


@pytest.fixture(scope="session")
def opencode_image(docker_engine: None) -> str:
    """The real OpenCode agent image; CI builds it, never skips it."""
    return _agent_image(OPENCODE_IMAGE, "just box-opencode")


@pytest.fixture(scope="session")
def gemini_image(docker_engine: None) -> str:
    """The real Gemini CLI agent image; CI builds it, never skips it."""
    return _agent_image(GEMINI_IMAGE, "just box-gemini")


@pytest.fixture(autouse=True, scope="session")
def _unsynced_git_objects() -> Iterator[None]:
    """In-process git writes skip libgit2's per-object fsync (on in the product).

    Durability cannot be observed without a power cut, and the fixtures write
    thousands of objects; in-process CLI calls run without it too, while ``impyard``
    run as a subprocess (integration and smoke tests) has it on.
    """
    import pygit2

    from impyard.knowledge.store.repo import configure_libgit2

    configure_libgit2()  # what the product sets, first, so it does not turn fsync back on
    pygit2.settings.enable_fsync_gitdir(False)
    yield
    pygit2.settings.enable_fsync_gitdir(True)


def _impyard_containers() -> dict[str, str]:
    """Every Impyard box on the engine: container id -> its run id."""
    import docker

    client = docker.from_env(timeout=10)
    try:
        # The low-level listing: no per-container inspect that races with removal.
        found = client.api.containers(all=True, filters={"label": "impyard.run"})
        return {c["Id"]: c["Labels"]["impyard.run"] for c in found}
    finally:
        client.close()


def _runs_under(root: Path, containers: dict[str, str]) -> list[str]:
    """The containers whose run lives in a data root under ``root``: boxes of other
    processes on the same engine (a bench, another checkout's tests) are not a leak."""
    return sorted(cid for cid, run in containers.items() if any(root.glob(f"**/runs/{run}")))


@pytest.fixture(autouse=True)
def _hygiene(request: pytest.FixtureRequest) -> Iterator[None]:
    before_env = dict(os.environ)
    is_docker = request.node.get_closest_marker("docker") is not None
    if is_docker:
        request.getfixturevalue("docker_engine")
        before_containers = _impyard_containers()
        tmp_path = request.getfixturevalue("tmp_path")
    yield
    ignored = {"PYTEST_CURRENT_TEST"}
    leaked_env = {
        k
        for k in set(os.environ) | set(before_env)
        if k not in ignored and os.environ.get(k) != before_env.get(k)
    }
    assert not leaked_env, f"test leaked environment variables: {sorted(leaked_env)}"
    if is_docker:
        new = {
            cid: run for cid, run in _impyard_containers().items() if cid not in before_containers
        }
        leaked = _runs_under(tmp_path, new)
        mounts = mounts_under(tmp_path)
        unmount_all(mounts)  # one leak fails this test, not a later session's cleanup
        assert not leaked, f"test leaked containers: {leaked}"
        assert not mounts, f"test left mounts behind: {mounts}"


@pytest.fixture
def cli(request: pytest.FixtureRequest, tmp_path: Path) -> Cli:
    """The CLI on ``tmp_path/home``: in this process, except for docker and integration
    tests, which start runs and servers that talk to the engine and take signals."""
    docker = request.node.get_closest_marker("docker") is not None
    integration = request.node.path.resolve().is_relative_to(INTEGRATION)
    return Cli(home=tmp_path / "home", in_process=not (docker or integration))


@pytest.fixture
def yuko(cli: Cli) -> Cli:
    """``cli`` on a data root holding one imp, yuko (``init``, then ``imp create yuko``)."""
    assert cli("init").code == 0
    created = cli("imp", "create", "yuko")
    assert created.code == 0, created.stderr
    return cli


@pytest.fixture(params=["in-process", "subprocess"])
def both_cli(request: pytest.FixtureRequest, tmp_path: Path) -> Cli:
    """The CLI both ways: the in-process form must answer as the real console command."""
    return Cli(home=tmp_path / "home", in_process=request.param == "in-process")


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    server = Upstream()
    yield server
    server.close()
