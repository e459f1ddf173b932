#!/usr/bin/env bash
# Build the agent box impyard-pi:latest without any image registry:
#   1. Pi, pinned to box/pi/VERSION, from the npm registry into a staging tree
#      (--ignore-scripts: nothing from the registry runs on this host);
#   2. a Debian trixie root filesystem (minbase + nodejs + curl + ca-certificates)
#      with mmdebstrap, the staging tree and the box/ tools synced in, the box
#      user 65532 added, and docs, caches and apt lists left out;
#   3. python-on-whales imports it as a candidate, checks that Pi starts in it
#      under a box's hardening, and only then tags it (impyard/box/agent_image.py).
# No host binary is copied in. An image built from the same recipe (this file,
# box/ and the pinned version) is kept; IMPYARD_REBUILD=1 forces a build.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
image=${1:-impyard-pi:latest}
python=${IMPYARD_PYTHON:-$top/.venv/bin/python}
suite=trixie
mirror=${IMPYARD_DEBIAN_MIRROR:-http://deb.debian.org/debian}
pi_version=$(tr -d ' \n' <"$top/box/pi/VERSION")

if [ ! -x "$python" ]; then
    echo "build-agent-box: no Python with Impyard at $python (run scripts/bootstrap.sh)" >&2
    exit 1
fi

recipe=$(
    cd "$top"
    {
        sha256sum scripts/build-agent-box.sh impyard/box/agent_image.py
        find box -type f ! -name '*.pyc' ! -path '*/__pycache__/*' -print0 | sort -z |
            xargs -0 sha256sum
    } | sha256sum | cut -c1-32
)
if [ "${IMPYARD_REBUILD:-0}" != 1 ] &&
    PYTHONPATH="$top" "$python" -m impyard.box.agent_image current "$image" "$recipe"; then
    echo "$image is up to date (recipe $recipe)"
    exit 0
fi

if [ "$(id -u)" != 0 ]; then
    echo "build-agent-box: mmdebstrap needs root to build the root filesystem" >&2
    exit 1
fi
need=()
command -v mmdebstrap >/dev/null 2>&1 || need+=(mmdebstrap)
command -v npm >/dev/null 2>&1 || need+=(npm)
if [ ${#need[@]} -gt 0 ]; then
    echo "build-agent-box: installing ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q "${need[@]}"
fi

started=$(date +%s)
work=$(mktemp -d "${TMPDIR:-/var/tmp}/impyard-pi-build.XXXXXX")
trap 'rm -rf "$work"' EXIT
staging="$work/staging"
mkdir -p "$staging/opt/impyard/bin" "$staging/opt/impyard/pi"

echo "build-agent-box: Pi $pi_version from npm"
npm install --global --prefix "$staging/opt/pi" --cache "$work/npm-cache" \
    --ignore-scripts --omit=dev --no-audit --no-fund --no-update-notifier --loglevel=error \
    "@mariozechner/pi-coding-agent@$pi_version" >/dev/null

for tool in "$top"/box/*; do
    [ -f "$tool" ] && [ "$(basename "$tool")" != __init__.py ] || continue
    install -m 0755 "$tool" "$staging/opt/impyard/bin/$(basename "$tool")"
done
install -m 0644 "$top/box/pi/settings.json" "$staging/opt/impyard/pi/settings.json"
install -m 0644 "$top/box/pi/steps.js" "$staging/opt/impyard/pi/steps.js"
find "$staging" -exec chown -h 0:0 {} +
chmod -R go-w "$staging"

echo "build-agent-box: Debian $suite root filesystem"
# Pinned timestamps: mmdebstrap makes an unchanged package set byte-stable.
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-1735689600}
mmdebstrap --quiet --variant=minbase \
    --include=ca-certificates,curl,nodejs \
    --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/info/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    --customize-hook="sync-in '$staging/opt' /opt" \
    --customize-hook='echo "imp:x:65532:65532:imp:/tmp:/usr/sbin/nologin" >>"$1/etc/passwd"' \
    --customize-hook='echo "imp:x:65532:" >>"$1/etc/group"' \
    --customize-hook='rm -rf "$1"/var/cache/apt/* "$1"/var/cache/debconf/*-old \
        "$1"/var/lib/apt/lists/* "$1"/var/log/* "$1"/root/.bash_history "$1"/root/.npm' \
    "$suite" "$work/rootfs.tar" "$mirror"

PYTHONPATH="$top" "$python" -m impyard.box.agent_image import "$work/rootfs.tar" \
    --tag "$image" --recipe "$recipe" --agent-version "$pi_version" --started "$started"
