#!/usr/bin/env bash
# bash scripts/build-node-image.sh [TAG]: build the node agent's image (default tag
# impyard-node:latest), the image `impyard cluster deploy` runs as `impyard node` on every
# swarm node, without any image registry:
#   1. a wheel of this working tree (`pip wheel --no-deps`, on this host);
#   2. a Debian bookworm root filesystem (minbase + python3, python3-venv and
#      ca-certificates: bookworm's python3 is the 3.11 pyproject.toml requires) with
#      mmdebstrap, and in it a venv at /opt/impyard where pip installs the wheel and its
#      dependencies from PyPI at the versions requirements-ci.txt pins (what the tests ran
#      against; no test extras), byte-compiled; docs, caches, apt lists, pip itself and
#      the host's resolv.conf left out;
#   3. python-on-whales imports it as a candidate, checks that `impyard --version` reports
#      this tree's version and the node agent's code loads in it, offline on a read-only
#      root, and only then tags it (impyard/cluster/node_image.py).
# No host file but the wheel and the pins goes in. An image built from the same recipe (this
# file, pyproject.toml, requirements-ci.txt and every file under impyard/: the node runs
# that code) is kept; IMPYARD_REBUILD=1 forces a build.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
image=${1:-impyard-node:latest}
python=${IMPYARD_PYTHON:-$top/.venv/bin/python}
suite=bookworm
mirror=${IMPYARD_DEBIAN_MIRROR:-http://deb.debian.org/debian}

if [ ! -x "$python" ]; then
    echo "build-node-image: no Python with Impyard at $python (run scripts/bootstrap.sh)" >&2
    exit 1
fi

recipe=$(
    cd "$top"
    {
        sha256sum scripts/build-node-image.sh pyproject.toml requirements-ci.txt
        find impyard -name __pycache__ -prune -o -type f -print0 | LC_ALL=C sort -z |
            xargs -0 sha256sum
    } | sha256sum | cut -c1-32
)
if [ "${IMPYARD_REBUILD:-0}" != 1 ] &&
    PYTHONPATH="$top" "$python" -m impyard.box.images.agent_image current "$image" "$recipe"; then
    echo "$image is up to date (recipe $recipe)"
    exit 0
fi

if [ "$(id -u)" != 0 ]; then
    echo "build-node-image: mmdebstrap needs root to build the root filesystem" >&2
    exit 1
fi
if ! command -v mmdebstrap >/dev/null 2>&1; then
    echo "build-node-image: installing mmdebstrap"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q mmdebstrap
fi

started=$(date +%s)
work=$(mktemp -d "${TMPDIR:-/var/tmp}/impyard-node-build.XXXXXX")
trap 'rm -rf "$work"' EXIT
version=$(PYTHONPATH="$top" "$python" -c 'from impyard import __version__; print(__version__)')

# The wheel is built from a copy of what the recipe hashed, so no build/ or egg-info lands
# in the checkout and no stray file of the checkout lands in the wheel.
mkdir -p "$work/src" "$work/impyard-wheel"
cp "$top/pyproject.toml" "$top/README.md" "$work/src/"
(cd "$top" && find impyard -name __pycache__ -prune -o -type f -print0 |
    xargs -0 cp --parents -t "$work/src")
"$python" -m pip wheel -q --no-deps --wheel-dir "$work/impyard-wheel" "$work/src"
wheel=$(find "$work/impyard-wheel" -name 'impyard-*.whl' -printf '%f\n')
# Only the pins (no comments) go in: requirements-ci.txt's own text names nothing needed.
grep -E '^[A-Za-z0-9_.-]+==' "$top/requirements-ci.txt" >"$work/impyard-wheel/constraints.txt"
# pip in the chroot trusts what pip on this host trusts (a TLS-inspecting proxy's CA, say),
# through REQUESTS_CA_BUNDLE: bookworm's pip ignores --cert for the index; the bundle is
# gone before the root filesystem is packed.
install -m 0644 "${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}" "$work/impyard-wheel/ca.crt"

echo "build-node-image: Debian $suite root filesystem with Impyard $version"
# Pinned timestamps: mmdebstrap makes an unchanged package set byte-stable.
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-1735689600}
# pip runs --isolated (no host pip configuration or PIP_* variable applies in the chroot)
# and compiles nothing itself: compileall writes unchecked-hash .pyc files, which an
# import trusts without reading the source (the image never changes, and a read-only root
# could not take a rewritten .pyc anyway). pip and setuptools leave the venv once they are
# done: the node agent installs nothing.
# The merged /usr is set up by mmdebstrap's own hook (symlinks and usr-is-merged): otherwise
# bookworm's init-system-helpers brings usrmerge, the converter, and with it perl (50 MB
# the node never runs).
mmdebstrap --quiet --variant=minbase \
    --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
    --include=ca-certificates,python3,python3-venv \
    --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/info/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    --customize-hook="copy-in '$work/impyard-wheel' /tmp" \
    --customize-hook='chroot "$1" python3 -m venv /opt/impyard' \
    --customize-hook="REQUESTS_CA_BUNDLE=/tmp/impyard-wheel/ca.crt chroot \"\$1\" \
        /opt/impyard/bin/python -m pip install --isolated -q \
        --no-cache-dir --no-compile --disable-pip-version-check \
        -c /tmp/impyard-wheel/constraints.txt /tmp/impyard-wheel/$wheel" \
    --customize-hook='chroot "$1" /opt/impyard/bin/python -m pip uninstall --isolated -q -y \
        pip setuptools' \
    --customize-hook='chroot "$1" /opt/impyard/bin/python -m compileall -q -j 0 \
        --invalidation-mode unchecked-hash /opt/impyard/lib >/dev/null' \
    --customize-hook='rm -rf "$1"/tmp/impyard-wheel "$1"/var/cache/apt/* \
        "$1"/var/cache/debconf/*-old "$1"/var/lib/apt/lists/* "$1"/var/log/* \
        "$1"/root/.cache "$1"/etc/resolv.conf "$1"/etc/hostname' \
    "$suite" "$work/rootfs.tar" "$mirror"

PYTHONPATH="$top" "$python" -m impyard.cluster.node_image import "$work/rootfs.tar" \
    --tag "$image" --recipe "$recipe" --version "$version" --started "$started"
