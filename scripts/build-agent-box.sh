#!/usr/bin/env bash
# bash scripts/build-agent-box.sh AGENT [TAG]: build an agent's box image (default tag
# impyard-AGENT:latest) without any image registry:
#   1. the agent, pinned to box/AGENT/VERSION, from the npm registry into a staging
#      tree, by the agent's own part scripts/agents/AGENT.sh (its stage_agent; npm runs
#      with --ignore-scripts: no install script from the registry runs on this host);
#   2. a Debian trixie root filesystem (minbase + nodejs + curl + ca-certificates and
#      the agent's extra packages) with mmdebstrap, the staging tree, the box/ tools
#      (/opt/impyard/bin) and the agent's files in box/AGENT (/opt/impyard/AGENT) synced
#      in, the box user 65532 added, and docs, caches and apt lists left out;
#   3. python-on-whales imports it as a candidate, checks that the agent starts in it
#      under a box's hardening and reports its pinned version, and only then tags it
#      (impyard/box/images/agent_image.py).
# No host binary is copied in. An image built from the same recipe (this file, the
# agent's part and files, the box/ tools, its row in impyard/box/images/agents.py and the
# pinned version) is kept; IMPYARD_REBUILD=1 forces a build.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
agent=${1:-}
python=${IMPYARD_PYTHON:-$top/.venv/bin/python}
suite=trixie
mirror=${IMPYARD_DEBIAN_MIRROR:-http://deb.debian.org/debian}

known=$(cd "$top/scripts/agents" && ls -- *.sh | sed 's/\.sh$//' | tr '\n' ' ')
if [ -z "$agent" ] || [ ! -f "$top/scripts/agents/$agent.sh" ]; then
    echo "usage: build-agent-box.sh AGENT [TAG]  (AGENT: ${known% })" >&2
    exit 2
fi
image=${2:-impyard-$agent:latest}
agent_version=$(tr -d ' \n' <"$top/box/$agent/VERSION")

if [ ! -x "$python" ]; then
    echo "build-agent-box: no Python with Impyard at $python (run scripts/bootstrap.sh)" >&2
    exit 1
fi

recipe=$(
    cd "$top"
    {
        sha256sum scripts/build-agent-box.sh "scripts/agents/$agent.sh" impyard/box/images/agent_image.py
        PYTHONPATH="$top" "$python" -m impyard.box.images.agents row "$agent"
        find box -maxdepth 1 -type f -print0 | sort -z | xargs -0 sha256sum
        find "box/$agent" -type f -print0 | sort -z | xargs -0 sha256sum
    } | sha256sum | cut -c1-32
)
if [ "${IMPYARD_REBUILD:-0}" != 1 ] &&
    PYTHONPATH="$top" "$python" -m impyard.box.images.agent_image current "$image" "$recipe"; then
    echo "$image is up to date (recipe $recipe)"
    exit 0
fi

if [ "$(id -u)" != 0 ]; then
    echo "build-agent-box: mmdebstrap needs root to build the root filesystem" >&2
    exit 1
fi
bash "$top/scripts/image-tools.sh"

started=$(date +%s)
work=$(mktemp -d "${TMPDIR:-/var/tmp}/impyard-$agent-build.XXXXXX")
trap 'rm -rf "$work"' EXIT
staging="$work/staging"
mkdir -p "$staging/opt/impyard/bin" "$staging/opt/impyard/$agent"

# shellcheck source=/dev/null
. "$top/scripts/agents/$agent.sh"
stage_agent

for tool in "$top"/box/*; do
    [ -f "$tool" ] && [ "$(basename "$tool")" != __init__.py ] || continue
    install -m 0755 "$tool" "$staging/opt/impyard/bin/$(basename "$tool")"
done
for file in "$top/box/$agent"/*; do
    [ -f "$file" ] || continue
    mode=0644
    [ -x "$file" ] && mode=0755
    install -m "$mode" "$file" "$staging/opt/impyard/$agent/$(basename "$file")"
done
find "$staging" -exec chown -h 0:0 {} +
chmod -R go-w "$staging"

echo "build-agent-box: Debian $suite root filesystem"
# Pinned timestamps: mmdebstrap makes an unchanged package set byte-stable.
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-1735689600}
mmdebstrap --quiet --variant=minbase \
    --include=ca-certificates,curl,nodejs${agent_packages:+,$agent_packages} \
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

PYTHONPATH="$top" "$python" -m impyard.box.images.agent_image import "$work/rootfs.tar" \
    --agent "$agent" --tag "$image" --recipe "$recipe" --agent-version "$agent_version" \
    --started "$started"
