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
    bash scripts/build-agent-box.sh pi

# Build the agent image impyard-claude-code:latest (Debian trixie + Claude Code; kept when unchanged)
box-claude-code:
    bash scripts/build-agent-box.sh claude-code
# Build the agent image impyard-codex:latest (Debian trixie + Codex, no registry; kept when unchanged)
box-codex:
    bash scripts/build-agent-box.sh codex

# Build the agent image impyard-opencode:latest (Debian trixie + OpenCode, no registry; kept when unchanged)
box-opencode:
    bash scripts/build-agent-box.sh opencode
# Build the agent image impyard-gemini:latest (Debian trixie + Gemini CLI, no registry; kept when unchanged)
box-gemini:
    bash scripts/build-agent-box.sh gemini

# Build the node agent's image impyard-node:latest (Debian bookworm + this tree's wheel; kept when unchanged)
node-image:
    bash scripts/build-node-image.sh

# Lint, type-check, and check the layers between packages (pyproject's import contracts)
lint:
    {{venv}}/ruff check impyard tests bench
    {{venv}}/ruff format --check impyard tests bench
    {{venv}}/mypy
    {{venv}}/lint-imports --no-cache

# Lint, then the whole test suite: unit tests in parallel, then the docker tests, four at a
# time on the one engine (each counts only the boxes of its own data root; much of a docker
# test is waiting on a box, an agent or a timeout, and four keep two cores busy where three
# left a tenth of them idle), once with boxes under runc and once under gVisor (runsc), the
# second only the docker tests not marked `one_runtime` (host logic the box's runtime does
# not change); then every bench at its smoke size, two at a time (each must still run and
# pass its own checks; figures are not judged). Work stealing keeps the long Pi and serve
# tests from ending the pass on one worker. Each part prints what it took
# (`==> part: N s`), and each docker pass its ten slowest tests.
test: lint
    @scripts/timed.sh unit {{venv}}/pytest -q -n auto tests/unit
    @scripts/timed.sh "docker under runc" {{venv}}/pytest -q -n 4 --dist worksteal --durations=10 tests/integration
    @IMPYARD_INIT_RUNTIME=runsc scripts/timed.sh "docker under runsc" {{venv}}/pytest -q -n 4 --dist worksteal --durations=10 -m "docker and not one_runtime" tests/integration
    @scripts/timed.sh "bench smoke" {{venv}}/python -m bench --smoke

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
