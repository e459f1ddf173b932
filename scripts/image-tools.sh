#!/usr/bin/env bash
# image-tools.sh: install what the agent image builds share (mmdebstrap, npm, setpriv)
# when missing. Bootstrap runs it once before building the images side by side, so no
# two builds run apt at once; a build run by hand runs it itself.
set -euo pipefail
need=()
command -v mmdebstrap >/dev/null 2>&1 || need+=(mmdebstrap)
command -v npm >/dev/null 2>&1 || need+=(npm)
command -v setpriv >/dev/null 2>&1 || need+=(util-linux)
if [ ${#need[@]} -gt 0 ]; then
    echo "image-tools: installing ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q "${need[@]}"
fi
