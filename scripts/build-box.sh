#!/usr/bin/env bash
# Build the box image offline: FROM scratch + the static busybox + the box/ tools.
# The build context is prepared here from a clean checkout, so the image is
# reproducible. A networked base is opt-in: BOX_BASE=debian:bookworm-slim.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
image=${1:-impyard-box:latest}
busybox=${BUSYBOX:-/bin/busybox}
ctx="$top/.box-context"

if ! "$busybox" --list >/dev/null 2>&1; then
    echo "build-box: $busybox is not a working busybox (apt-get install busybox-static)" >&2
    exit 1
fi
if ldd "$busybox" >/dev/null 2>&1; then
    echo "build-box: $busybox is dynamically linked; the scratch image needs busybox-static" >&2
    exit 1
fi

rm -rf "$ctx"
mkdir -p "$ctx/busybox/bin" "$ctx/busybox/etc" "$ctx/busybox/tmp" "$ctx/impyard/opt/impyard/bin"
cp "$busybox" "$ctx/busybox/bin/busybox"
for applet in $("$busybox" --list); do
    [ "$applet" = busybox ] || ln -s busybox "$ctx/busybox/bin/$applet"
done
chmod 1777 "$ctx/busybox/tmp"
printf 'root:x:0:0:root:/root:/bin/sh\nimp:x:65532:65532:imp:/tmp:/bin/sh\n' >"$ctx/busybox/etc/passwd"
printf 'root:x:0:\nimp:x:65532:\n' >"$ctx/busybox/etc/group"
for tool in "$top"/box/*; do
    [ -f "$tool" ] && [ "$(basename "$tool")" != __init__.py ] || continue
    install -m 0755 "$tool" "$ctx/impyard/opt/impyard/bin/$(basename "$tool")"
done
cp "$top/Dockerfile.box" "$ctx/Dockerfile"

# Pin timestamps so an unchanged checkout gives identical layers.
find "$ctx" -exec touch -h -d '2000-01-01T00:00:00Z' {} +

build_args=()
[ -n "${BOX_BASE:-}" ] && build_args+=(--build-arg "BASE=$BOX_BASE")
# The classic builder needs no buildx plugin, which this engine may lack.
errors=$(mktemp)
if ! DOCKER_BUILDKIT=${DOCKER_BUILDKIT:-0} docker build -q "${build_args[@]}" -t "$image" "$ctx" >/dev/null 2>"$errors"; then
    cat "$errors" >&2
    rm -f "$errors"
    exit 1
fi
rm -f "$errors"
echo "built $image"
