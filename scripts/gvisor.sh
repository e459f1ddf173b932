#!/usr/bin/env bash
# Install gVisor's runsc from Debian trixie on this (bookworm) host and register it
# with the running engine as the runtime "runsc", beside runc. Idempotent.
#
# Bookworm's own runsc (0.0~20221219) is too old: a box reaches a host listener but
# then fails reading the answer (EAGAIN). Trixie's is one static binary with no
# dependencies, so only that .deb is fetched, through a private apt configuration
# under a temporary directory: the host's apt sources are not touched. apt verifies
# the trixie Release file's signature with the host's debian-archive-keyring, the
# Packages index against the Release file's SHA256, and the .deb against the index's
# SHA256, before `apt-get download` keeps it.
#
# The engine learns the runtime from /etc/docker/daemon.json (merged: other keys
# stay) and a SIGHUP, which reloads runtimes without touching running containers.
# The default runtime is never changed: dockerd 20.10 panics when a reload removes
# the runtime default-runtime names.
set -euo pipefail

min_version=0.0~20240729
mirror=${IMPYARD_DEBIAN_MIRROR:-http://deb.debian.org/debian}
daemon_json=${IMPYARD_DOCKER_DAEMON_JSON:-/etc/docker/daemon.json}
wait_seconds=${IMPYARD_DOCKERD_WAIT:-30}

installed=$(dpkg-query -W -f='${Version}' runsc 2>/dev/null || true)
if [ -n "$installed" ] && dpkg --compare-versions "$installed" ge "$min_version"; then
    :
elif [ "$(id -u)" != 0 ]; then
    echo "gvisor: runsc $min_version or later is missing, and installing it needs root" >&2
    exit 1
else
    echo "gvisor: installing runsc from Debian trixie"
    work=$(mktemp -d "${TMPDIR:-/var/tmp}/impyard-gvisor.XXXXXX")
    trap 'rm -rf "$work"' EXIT
    mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/parts" "$work/prefs"
    echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror trixie main" \
        >"$work/sources.list"
    opts=(
        -o "Dir::Etc::SourceList=$work/sources.list" -o "Dir::Etc::SourceParts=$work/parts"
        -o "Dir::Etc::Preferences=$work/prefs/none" -o "Dir::Etc::PreferencesParts=$work/prefs"
        -o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache"
        -o "APT::Architectures=$(dpkg --print-architecture)" -o Acquire::Languages=none
        -o APT::Sandbox::User=root
    )
    apt-get "${opts[@]}" -q -q update
    (cd "$work" && apt-get "${opts[@]}" -q -q download runsc)
    deb=$(ls "$work"/runsc_*.deb)
    dpkg -i "$deb" >/dev/null
    echo "gvisor: installed runsc $(dpkg-query -W -f='${Version}' runsc)"
fi
runsc_path=$(command -v runsc)

# Merge the runtime into daemon.json; python3 is part of this host's base system.
changed=$(
    python3 - "$daemon_json" "$runsc_path" <<'PY'
import json, os, sys
path, runsc = sys.argv[1], sys.argv[2]
try:
    with open(path) as f:
        config = json.load(f)
except FileNotFoundError:
    config = {}
want = {"path": runsc, "runtimeArgs": ["--network=host"]}
runtimes = config.setdefault("runtimes", {})
if runtimes.get("runsc") == want:
    print("no")
    sys.exit(0)
runtimes["runsc"] = want
os.makedirs(os.path.dirname(path), exist_ok=True)
tmp = path + ".impyard-tmp"
with open(tmp, "w") as f:
    json.dump(config, f, indent=2, sort_keys=True)
    f.write("\n")
    f.flush()
    os.fsync(f.fileno())
os.replace(tmp, path)
print("yes")
PY
)

if ! docker info >/dev/null 2>&1; then
    # The engine reads daemon.json when it starts.
    exit 0
fi
if [ "$changed" = no ] && docker info --format '{{json .Runtimes}}' | grep -q '"runsc"'; then
    echo "gvisor: runsc registered with the engine"
    exit 0
fi
pid=$(cat /var/run/docker.pid 2>/dev/null || pgrep -xo dockerd || true)
if [ -z "$pid" ]; then
    echo "gvisor: no dockerd process to reload; restart the engine to load $daemon_json" >&2
    exit 1
fi
kill -HUP "$pid"
for _ in $(seq "$wait_seconds"); do
    if docker info --format '{{json .Runtimes}}' 2>/dev/null | grep -q '"runsc"'; then
        echo "gvisor: runsc registered with the engine"
        exit 0
    fi
    sleep 1
done
echo "gvisor: the engine did not list runsc after reloading $daemon_json" >&2
exit 1
