#!/usr/bin/env bash
# Everything a fresh Debian machine (Python + root) needs before the demo or the
# tests: the Docker engine, a virtualenv with Impyard and its test tools (which
# bring `just`), and the offline box image. Idempotent and quiet when done.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"

bash scripts/engine.sh

if [ ! -x .venv/bin/python ]; then
    echo "bootstrap: creating .venv"
    python3 -m venv .venv
fi
stamp=.venv/.impyard-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    echo "bootstrap: installing impyard[test] into .venv"
    .venv/bin/python -m pip install -q --upgrade pip
    .venv/bin/python -m pip install -q -e '.[test]'
    touch "$stamp"
fi
# Byte-compile the package even where PYTHONDONTWRITEBYTECODE is set: every CLI
# start-up would otherwise recompile it (~50 ms of each `impyard run`).
.venv/bin/python -m compileall -q impyard >/dev/null

bash scripts/build-box.sh impyard-box:latest
bash scripts/build-agent-box.sh impyard-pi:latest
