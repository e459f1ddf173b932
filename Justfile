# Impyard tasks. `bash scripts/bootstrap.sh` first on a fresh machine (it brings `just`).

set shell := ["bash", "-euo", "pipefail", "-c"]

venv := justfile_directory() / ".venv/bin"

default:
    @just --list

# Install (if missing) and start the Docker engine
engine:
    bash scripts/engine.sh

# Build the offline box image impyard-box:latest
box:
    bash scripts/build-box.sh impyard-box:latest

# Build the agent image impyard-pi:latest (Debian trixie + Pi, no registry; kept when unchanged)
box-pi:
    bash scripts/build-agent-box.sh impyard-pi:latest

# Lint and type-check the package
lint:
    {{venv}}/ruff check impyard tests bench
    {{venv}}/ruff format --check impyard tests bench
    {{venv}}/mypy

# Lint, then the whole test suite: unit tests in parallel, then the docker tests one at a time
# (they share one engine, and their hygiene check counts its containers): all of them with
# boxes under runc, then the box-facing ones again under gVisor (runsc); then every bench at
# its smoke size (each must still run and pass its own checks; figures are not judged)
test: lint
    {{venv}}/pytest -q -n auto tests/unit
    {{venv}}/pytest -q tests/integration
    IMPYARD_INIT_RUNTIME=runsc {{venv}}/pytest -q {{runsc_suite}}
    {{venv}}/python -m bench --smoke

# The docker tests that run again with boxes under runsc, chosen for what a runtime changes:
# the gateway reached through the box's own network namespace, the control endpoint and the
# snapshot of what the box wrote (fifos, modes, links), and the tmpfs primitive. test_runsc
# runs under gVisor in the first pass too (a note landing, a timeout kill, every direct
# network path refused). The whole suite under both runtimes does not fit CI's time on two
# cores; `IMPYARD_INIT_RUNTIME=runsc .venv/bin/pytest tests/integration` runs it.
runsc_suite := "tests/integration/test_gateway_box.py tests/integration/test_box_control.py tests/integration/test_check_box.py"

# Full demo: verify the tmpfs primitive
demo:
    bash scripts/demo.sh

# Pin the test environment CI installs (requirements-ci.txt) from pyproject.toml
lock:
    {{venv}}/python -m pip install -q pip-tools
    {{venv}}/pip-compile -q --extra test --strip-extras --no-emit-index-url --no-emit-find-links -o requirements-ci.txt pyproject.toml

# Benchmarks at full size (the tests run them at smoke size)
bench:
    {{venv}}/python -m bench
