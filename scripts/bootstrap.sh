#!/usr/bin/env bash
# Everything a fresh Debian machine (Python + root) needs before the demo or the
# tests: the Docker engine with gVisor's runsc beside runc, a virtualenv with
# Impyard and its test tools (which bring `just`), and the offline box images.
# Idempotent and quiet when done.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"

bash scripts/engine.sh
bash scripts/gvisor.sh

# The console's browser tests drive Debian's chromium through its chromedriver (never a
# browser a test tool downloads).
if ! [ -x /usr/bin/chromium ] || ! [ -x /usr/bin/chromedriver ]; then
    echo "bootstrap: installing chromium and chromium-driver"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null
fi

# A big imp's checkout layer is a squashfs image written by tar2sqfs (without it, files).
if ! command -v tar2sqfs >/dev/null 2>&1; then
    echo "bootstrap: installing squashfs-tools-ng"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq squashfs-tools-ng >/dev/null
fi

if [ ! -x .venv/bin/python ]; then
    echo "bootstrap: creating .venv"
    python3 -m venv .venv
fi
stamp=.venv/.impyard-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ requirements-ci.txt -nt "$stamp" ]; then
    # The pinned versions (requirements-ci.txt, from `just lock`), then Impyard itself:
    # every machine runs the tests against the same packages.
    echo "bootstrap: installing the locked test environment into .venv"
    .venv/bin/python -m pip install -q --upgrade pip
    .venv/bin/python -m pip install -q -r requirements-ci.txt
    .venv/bin/python -m pip install -q --no-deps -e .
    touch "$stamp"
fi
# Byte-compile the package even where PYTHONDONTWRITEBYTECODE is set: every CLI
# start-up would otherwise recompile it (~50 ms of each `impyard run`).
.venv/bin/python -m compileall -q impyard >/dev/null
# `impyard` on a new shell's PATH (the README's quick start types it bare).
bash scripts/link-cli.sh

bash scripts/build-box.sh impyard-box:latest
# Every agent's image (scripts/agents/AGENT.sh), each kept when its recipe is unchanged,
# and the node agent's image, built side by side: each mostly waits on Debian's mirror
# and npm (one after another they took four to six minutes of a fresh machine; side by
# side about two). The tools they share are installed first, so no two run apt at once.
bash scripts/image-tools.sh
builds=()
for part in scripts/agents/*.sh; do
    agent=$(basename "$part" .sh)
    bash scripts/build-agent-box.sh "$agent" 2>&1 | sed -u "s/^/[$agent] /" &
    builds+=("$agent:$!")
done
# The node agent's image (`impyard cluster deploy` runs it on every swarm node), kept while
# this tree's code and pins are unchanged; built beside the agents' images.
bash scripts/build-node-image.sh 2>&1 | sed -u "s/^/[node] /" &
builds+=("node:$!")
failed=()
for build in "${builds[@]}"; do
    wait "${build#*:}" || failed+=("${build%%:*}")
done
if [ ${#failed[@]} -gt 0 ]; then
    echo "bootstrap: the image build failed for: ${failed[*]} (its lines above start with its name)" >&2
    exit 1
fi
echo "==> bootstrap: ${SECONDS} s"
