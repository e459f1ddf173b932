#!/usr/bin/env bash
# Install (when missing) and start the Docker engine on a Debian machine, as root.
# Idempotent: a running engine is left alone. No registry is reachable here, so
# the engine runs without a bridge or iptables and boxes use --network none.
set -euo pipefail

log=${IMPYARD_DOCKERD_LOG:-/var/log/impyard-dockerd.log}
wait_seconds=${IMPYARD_DOCKERD_WAIT:-60}

if docker info >/dev/null 2>&1; then
    echo "engine: already running"
    exit 0
fi

if [ "$(id -u)" != 0 ]; then
    echo "engine: not running, and starting it needs root" >&2
    exit 1
fi

need=()
command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
dpkg -s busybox-static >/dev/null 2>&1 || need+=(busybox-static)
if [ ${#need[@]} -gt 0 ]; then
    echo "engine: installing ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q "${need[@]}"
fi

# A killed engine leaves its pid file behind, and a new dockerd then refuses to
# start ("pid file found"): remove it when its process is gone.
pidfile=/var/run/docker.pid
if [ -f "$pidfile" ]; then
    pid=$(cat "$pidfile" 2>/dev/null || true)
    if [ -z "$pid" ] || ! kill -0 "$pid" 2>/dev/null; then
        echo "engine: removing stale $pidfile"
        rm -f "$pidfile"
    fi
fi

if ! pgrep -x dockerd >/dev/null 2>&1; then
    echo "engine: starting dockerd (log: $log)"
    nohup dockerd --bridge=none --iptables=false >>"$log" 2>&1 </dev/null &
fi

for _ in $(seq "$wait_seconds"); do
    if docker info >/dev/null 2>&1; then
        echo "engine: ready"
        exit 0
    fi
    sleep 1
done
echo "engine: dockerd did not answer within ${wait_seconds}s; last log lines:" >&2
tail -n 20 "$log" >&2 || true
exit 1
