#!/usr/bin/env bash
# A Docker Swarm of N nodes on this one machine, for tests and for trying cluster mode.
#
#   swarm-lab.sh up N --home DIR [--image IMG]...   start the lab (root)
#   swarm-lab.sh pids                               one line per node: name, dockerd pid
#   swarm-lab.sh down                               remove every trace of it (root)
#
# Node K (impyard-lab-K) is a network namespace with one veth, eth0 10.213.0.(10+K)/24,
# whose host end iylabK sits on the bridge iylab0 (10.213.0.1/24). The nodes have no
# default route: they reach the host and each other, nothing else. Each runs its own
# dockerd (data root /var/lib/impyard-lab/impyard-lab-K, sockets and state under
# $IMPYARD_LAB_DIR, default /run/impyard-lab); node 1 is the swarm's manager, the others
# join it as workers. The host's engine, routes and iptables are never touched.
set -euo pipefail

readonly LAB=${IMPYARD_LAB_DIR:-/run/impyard-lab}
readonly DATA=/var/lib/impyard-lab
readonly BRIDGE=iylab0
readonly SUBNET=10.213.0
readonly PREFIX=impyard-lab-
# A file in $LAB saying the directory is the lab's, so `down` never removes a directory
# IMPYARD_LAB_DIR pointed at by mistake.
readonly MARKER=.impyard-lab
readonly WAIT=${IMPYARD_LAB_WAIT:-60}
readonly MAX_NODES=244 # 10.213.0.11 .. 10.213.0.254

# lab_deploy DIR: what the lab puts in place for Impyard once the swarm is up. DIR becomes
# an Impyard data root unless it already is one; its org policy gets a [cluster] section
# (unless it has one) that places serve's runs on the lab: the cluster API on the bridge's
# address, node 1's engine as the swarm manager, each node's engine socket and work
# directory by the node's name; then the policy is deployed and, when the node agent's
# image is there, the agent is deployed as a global service (`impyard cluster deploy`).
lab_deploy() {
    local home=$1
    local cli=${IMPYARD_CLI:-impyard}
    command -v "$cli" >/dev/null 2>&1 ||
        die "cannot set up $home: '$cli' is not on PATH (set IMPYARD_CLI to the impyard command)"
    if [ -f "$home/policy/org.toml" ] && [ -d "$home/knowledge" ]; then
        echo "lab: $home is already an Impyard data root"
    else
        "$cli" --home "$home" init >/dev/null
    fi
    mkdir -p "$DATA/work"
    if ! grep -q '^\[cluster\]' "$home/policy/org.toml"; then
        cat >>"$home/policy/org.toml" <<EOF

[cluster]
# Written by scripts/swarm-lab.sh: serve places every run on the lab's nodes.
enabled = true
listen = "$SUBNET.1:${IMPYARD_LAB_PORT:-7480}"
lease_seconds = ${IMPYARD_LAB_LEASE_SECONDS:-10}
manager = "$(node_sock 1)"
node_engine_socket = "$LAB/{{.Node.Hostname}}/docker.sock"
node_work_dir = "$DATA/work"
EOF
    fi
    "$cli" --home "$home" deploy >/dev/null
    if docker image inspect impyard-node:latest >/dev/null 2>&1; then
        "$cli" --home "$home" cluster deploy
    else
        echo "lab: impyard-node:latest is not built: the node agent is not deployed" \
            "(bash scripts/build-node-image.sh, then impyard cluster deploy)"
    fi
}

# Usage text on stderr, after the problem when there is one; exit 2.
usage() {
    [ $# = 0 ] || echo "lab: $*" >&2
    cat >&2 <<EOF
usage: $0 up N --home DIR [--image IMG]...
       $0 pids
       $0 down
EOF
    exit 2
}

die() {
    echo "lab: $*" >&2
    exit 1
}

need_root() {
    [ "$(id -u)" = 0 ] || die "'$1' needs root (network namespaces, dockerd)"
}

check_lab_dir() {
    case $LAB in
    /*/*) ;;
    *) die "IMPYARD_LAB_DIR must be an absolute path below a top-level directory, not '$LAB'" ;;
    esac
    # Each node's engine and containerd listen on unix sockets under it, and a socket's
    # path has at most 107 bytes.
    local longest="$LAB/${PREFIX}$MAX_NODES/exec/containerd/containerd.sock.ttrpc"
    [ ${#longest} -le 107 ] ||
        die "IMPYARD_LAB_DIR is too long for the engines' sockets (${#longest} > 107 bytes): $LAB"
}

# Time each step and print one line per step.
step_started=0
step_begin() { step_started=$(date +%s%N); }
step_end() {
    local cs=$((($(date +%s%N) - step_started) / 10000000))
    printf 'lab: %s (%d.%02d s)\n' "$1" $((cs / 100)) $((cs % 100))
}

node_name() { echo "$PREFIX$1"; }
node_dir() { echo "$LAB/$PREFIX$1"; }
node_sock() { echo "unix://$LAB/$PREFIX$1/docker.sock"; }
node_addr() { echo "$SUBNET.$((10 + $1))"; }
on_node() {
    local k=$1
    shift
    docker -H "$(node_sock "$k")" "$@"
}

# The nodes a lab directory holds, by number, ascending.
lab_nodes() {
    local d
    [ -d "$LAB" ] || return 0
    for d in "$LAB/$PREFIX"*; do
        [ -d "$d" ] && echo "${d##*/"$PREFIX"}"
    done | grep -E '^[0-9]+$' | sort -n || true
}

# Whether a process is alive (a zombie is not: it has exited, its parent just has not
# collected it yet).
pid_alive() {
    local stat
    # `read`, not $(<file): a $(<file) of a process gone meanwhile ended the EXIT trap
    # that takes a failed `up` down, half way.
    read -r stat 2>/dev/null <"/proc/$1/stat" || return 1
    stat=${stat##*) }
    [ "${stat:0:1}" != Z ]
}

# A pid read from a pidfile, when that process is alive; nothing otherwise.
live_pid() {
    local pid
    pid=$(cat "$1" 2>/dev/null || true)
    if [[ $pid =~ ^[0-9]+$ ]] && pid_alive "$pid"; then echo "$pid"; fi
}

lab_netns() { ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$PREFIX[0-9]+$" || true; }
lab_links() { ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' | grep -E '^iylab[0-9]+$' || true; }

# What of a lab is running now: live engines, namespaces, the bridge.
lab_running() {
    local k found=()
    for k in $(lab_nodes); do
        if [ -n "$(live_pid "$(node_dir "$k")/docker.pid")" ]; then found+=("$(node_name "$k")"); fi
    done
    for k in $(lab_netns); do
        [[ " ${found[*]} " == *" $k "* ]] || found+=("$k")
    done
    if ip link show "$BRIDGE" >/dev/null 2>&1; then found+=("$BRIDGE"); fi
    echo "${found[*]}"
}

# Every process of the lab: in a node's network namespace, named by a lab path on its
# command line (containerd, shims, runc/runsc state roots), or in a node's cgroup
# (boxes with --network none have their own namespace and argv, but not their cgroup).
# With "containers", only the processes in the nodes' container cgroups.
lab_processes() {
    local only=${1:-} ns pid
    {
        if [ "$only" != containers ]; then
            for ns in $(lab_netns); do ip netns pids "$ns" 2>/dev/null || true; done
        fi
        local cmdline cgroup
        for pid in /proc/[0-9]*; do
            pid=${pid#/proc/}
            # Read in this shell: a grep given the lab path would match its own argv.
            cmdline=$(2>/dev/null tr '\0' ' ' <"/proc/$pid/cmdline") || continue
            cgroup=""
            read -r -d '' cgroup 2>/dev/null <"/proc/$pid/cgroup" || [ -n "$cgroup" ] || continue
            if [[ $only != containers && ($cmdline == *"$LAB/"* || $cmdline == *"$DATA/"*) ]] ||
                [[ $cgroup =~ :/$PREFIX[0-9]+(/|$'\n'|$) ]]; then
                echo "$pid"
            fi
        done
    } | grep -vx "$$" | sort -un || true
}

# Mount points under the lab's directories, deepest first (mountinfo escapes spaces as \040).
lab_mounts() {
    awk '{print $5}' /proc/self/mountinfo | while read -r m; do
        m=$(printf '%b' "$m")
        case $m in "$LAB" | "$LAB"/* | "$DATA" | "$DATA"/* | /run/netns/"$PREFIX"*) echo "$m" ;; esac
    done | awk '{print length, $0}' | sort -rn | cut -d' ' -f2- || true
}

cmd_down() {
    need_root down
    check_lab_dir
    local k pid pids=() deadline boxes
    step_begin
    # The containers go first: a stopping dockerd gives each one its stop timeout (10 s)
    # to end, for state this removes anyway.
    boxes=$(lab_processes containers | tr '\n' ' ')
    # shellcheck disable=SC2086
    if [ -n "${boxes// /}" ]; then kill -KILL $boxes 2>/dev/null || true; fi
    for k in $(lab_nodes); do
        pid=$(live_pid "$(node_dir "$k")/docker.pid")
        if [ -n "$pid" ]; then pids+=("$pid"); fi
    done
    if [ ${#pids[@]} -gt 0 ]; then
        kill -TERM "${pids[@]}" 2>/dev/null || true
        deadline=$((SECONDS + 20))
        while [ $SECONDS -lt $deadline ]; do
            local alive=0
            for pid in "${pids[@]}"; do if pid_alive "$pid"; then alive=1; fi; done
            if [ $alive = 0 ]; then break; fi
            sleep 0.2
        done
        kill -KILL "${pids[@]}" 2>/dev/null || true
    fi
    step_end "containers killed, ${#pids[@]} engine(s) stopped"

    step_begin
    local round left=""
    for round in 1 2 3 4 5 6 7 8 9 10; do
        left=$(lab_processes | tr '\n' ' ')
        if [ -z "${left// /}" ]; then break; fi
        # shellcheck disable=SC2086
        kill -KILL $left 2>/dev/null || true
        sleep 0.2
    done
    [ -z "${left// /}" ] || echo "lab: processes still alive after SIGKILL: $left" >&2
    step_end "leftover processes killed"

    step_begin
    local m
    while read -r m; do
        if [ -n "$m" ]; then umount -l "$m" 2>/dev/null || true; fi
    done < <(lab_mounts)
    for k in $(lab_netns); do ip netns del "$k" 2>/dev/null || true; done
    for k in $(lab_links); do ip link del "$k" 2>/dev/null || true; done
    ip link del "$BRIDGE" 2>/dev/null || true
    # The containers' cgroups live under a parent per node (dockerd --cgroup-parent).
    local cg
    for cg in /sys/fs/cgroup/*/"$PREFIX"* /sys/fs/cgroup/"$PREFIX"*; do
        if [ -d "$cg" ]; then find "$cg" -depth -type d -exec rmdir {} + 2>/dev/null || true; fi
    done
    step_end "mounts, namespaces, links and cgroups removed"

    step_begin
    if [ -d "$LAB" ]; then
        if [ -f "$LAB/$MARKER" ]; then
            rm -rf --one-file-system "$LAB"
        else
            for k in $(lab_nodes); do rm -rf --one-file-system "$(node_dir "$k")"; done
        fi
    fi
    rm -rf --one-file-system "$DATA"
    step_end "lab directories and data roots removed"
    local still
    still=$(lab_running)
    [ -z "$still" ] || die "down left parts of the lab running: $still"
    echo "lab: down"
}

cmd_pids() {
    check_lab_dir
    local k pid nodes
    nodes=$(lab_nodes)
    [ -n "$nodes" ] || die "no lab under $LAB (start one with: $0 up N --home DIR)"
    for k in $nodes; do
        pid=$(cat "$(node_dir "$k")/docker.pid" 2>/dev/null || true)
        echo "$(node_name "$k") ${pid:--}"
    done
}

# The daemon configuration of a node: the host's registered runtimes (runsc), nothing else,
# so a box runs under the same runtime on a node as on the host.
write_daemon_json() {
    python3 - "$1" <<'PY'
import json, sys
try:
    with open("/etc/docker/daemon.json") as f:
        host = json.load(f)
except FileNotFoundError:
    host = {}
except ValueError as exc:
    sys.exit(f"lab: /etc/docker/daemon.json is not valid JSON: {exc}")
config = {"runtimes": host["runtimes"]} if isinstance(host, dict) and host.get("runtimes") else {}
with open(sys.argv[1], "w") as f:
    json.dump(config, f, indent=2)
    f.write("\n")
PY
}

make_network() {
    local n=$1 k name
    ip link add "$BRIDGE" type bridge
    ip addr add "$SUBNET.1/24" dev "$BRIDGE"
    ip link set "$BRIDGE" up
    for k in $(seq "$n"); do
        name=$(node_name "$k")
        ip netns add "$name"
        ip link add "iylab$k" type veth peer name eth0 netns "$name"
        ip link set "iylab$k" master "$BRIDGE" up
        ip -n "$name" link set lo up
        ip -n "$name" addr add "$(node_addr "$k")/24" dev eth0
        ip -n "$name" link set eth0 up
    done
}

start_engine() {
    local k=$1 dir name
    dir=$(node_dir "$k")
    name=$(node_name "$k")
    mkdir -p "$dir/exec" "$dir/etc-docker" "$DATA/$name"
    if [ -f "$dir/docker.pid" ] && [ -z "$(live_pid "$dir/docker.pid")" ]; then
        echo "lab: removing the stale pidfile of a dead engine: $dir/docker.pid"
        rm -f "$dir/docker.pid"
    fi
    write_daemon_json "$dir/daemon.json"
    # nsenter, not `ip netns exec`: that one remounts /sys for the namespace, which hides
    # the cgroup mounts, and dockerd then fails ("Devices cgroup isn't mounted").
    # The engine's own UTS namespace gives it the node's hostname (Swarm's Node.Hostname).
    # Its own mount namespace: its mounts stay out of the host's, and /etc/docker is its
    # own directory there, because dockerd keeps the key its engine ID comes from in
    # /etc/docker/key.json, whatever --config-file says (two nodes would share one ID).
    # --cgroup-parent puts the node's containers where `down` finds them.
    nohup nsenter --net="/run/netns/$name" \
        unshare --uts --mount --propagation slave \
        sh -c 'hostname "$1"; mkdir -p /etc/docker; mount --bind "$2" /etc/docker; shift 2; exec dockerd "$@"' \
        sh "$name" "$dir/etc-docker" \
        --data-root "$DATA/$name" --exec-root "$dir/exec" --pidfile "$dir/docker.pid" \
        -H "$(node_sock "$k")" --bridge=none --iptables=false \
        --config-file "$dir/daemon.json" --cgroup-parent "/$name" \
        >>"$dir/dockerd.log" 2>&1 </dev/null &
    echo $! >"$dir/launcher.pid"
}

wait_engine() {
    local k=$1 dir deadline
    dir=$(node_dir "$k")
    deadline=$((SECONDS + WAIT))
    local problem=""
    while ! on_node "$k" info --format '{{.ID}}' >/dev/null 2>&1; do
        if [ -z "$(live_pid "$dir/launcher.pid")" ]; then
            problem="exited"
        elif [ $SECONDS -ge "$deadline" ]; then
            problem="did not answer within ${WAIT}s"
        fi
        if [ -n "$problem" ]; then
            echo "lab: the engine of $(node_name "$k") $problem; last lines of $dir/dockerd.log:" >&2
            tail -n 20 "$dir/dockerd.log" >&2 || true
            return 1
        fi
        sleep 0.2
    done
}

wait_ready() {
    local n=$1 deadline ready
    deadline=$((SECONDS + WAIT))
    while :; do
        ready=$(on_node 1 node ls --format '{{.Status}}' 2>/dev/null | grep -c '^Ready$' || true)
        if [ "$ready" = "$n" ]; then return 0; fi
        [ $SECONDS -lt "$deadline" ] || die "only $ready of $n nodes are Ready after ${WAIT}s (see $LAB/*/dockerd.log)"
        sleep 0.2
    done
}

load_images() {
    local n=$1 img k tar="$DATA/image.tar"
    shift
    for img in "$@"; do
        step_begin
        docker save -o "$tar" "$img"
        for k in $(seq "$n"); do on_node "$k" load -q -i "$tar" >/dev/null; done
        rm -f "$tar"
        step_end "image $img loaded on $n node(s)"
    done
}

up_failed() {
    echo "lab: up failed; taking down what it started" >&2
    cmd_down >/dev/null 2>&1 || echo "lab: could not take it all down; run '$0 down'" >&2
}

cmd_up() {
    local n="" home="" images=()
    while [ $# -gt 0 ]; do
        case $1 in
        --home) [ $# -ge 2 ] || usage "--home needs a directory"; home=$2; shift 2 ;;
        --home=*) home=${1#--home=}; shift ;;
        --image) [ $# -ge 2 ] || usage "--image needs an image"; images+=("$2"); shift 2 ;;
        --image=*) images+=("${1#--image=}"); shift ;;
        -*) usage "unknown option '$1'" ;;
        *) [ -z "$n" ] || usage "one N only, not '$n' and '$1'"; n=$1; shift ;;
        esac
    done
    [ -n "$n" ] || usage "up needs the number of nodes N"
    [ -n "$home" ] || usage "up needs --home DIR, the data root the lab deploys"
    [[ $n =~ ^[1-9][0-9]*$ ]] && [ "$n" -le $MAX_NODES ] ||
        usage "N must be a whole number from 1 to $MAX_NODES, not '$n'"
    need_root up
    check_lab_dir
    for tool in ip nsenter unshare dockerd docker python3; do
        command -v "$tool" >/dev/null 2>&1 || die "'$tool' is missing (iproute2, util-linux, docker.io, python3)"
    done
    home=$(realpath -m "$home")
    local running
    running=$(lab_running)
    [ -z "$running" ] || die "a lab is already up ($running under $LAB); run '$0 down' first"
    docker image inspect impyard-box:latest >/dev/null 2>&1 ||
        die "the host engine has no impyard-box:latest (build it with scripts/build-box.sh)"
    for img in "${images[@]}"; do
        docker image inspect "$img" >/dev/null 2>&1 || die "the host engine has no image $img"
    done
    if [ -d "$LAB" ] || [ -d "$DATA" ]; then
        echo "lab: removing what a lab that is not running left behind"
        cmd_down >/dev/null
    fi
    # A failed start leaves nothing half made: what is up is taken down again.
    trap 'up_failed' EXIT

    mkdir -p "$LAB" "$DATA"
    touch "$LAB/$MARKER"
    step_begin
    make_network "$n"
    step_end "network: $BRIDGE $SUBNET.1/24 and $n node namespace(s)"

    step_begin
    local k
    for k in $(seq "$n"); do start_engine "$k"; done
    for k in $(seq "$n"); do wait_engine "$k"; done
    step_end "engines: $n dockerd answering"

    step_begin
    on_node 1 swarm init --advertise-addr "$(node_addr 1)" --listen-addr "$(node_addr 1):2377" >/dev/null
    local token
    token=$(on_node 1 swarm join-token -q worker)
    for k in $(seq 2 "$n"); do
        on_node "$k" swarm join --token "$token" --advertise-addr "$(node_addr "$k")" \
            --listen-addr "$(node_addr "$k"):2377" "$(node_addr 1):2377" >/dev/null
    done
    wait_ready "$n"
    step_end "swarm: $(node_name 1) manager, $((n - 1)) worker(s), all Ready"

    step_begin
    local labelled=0 id
    for k in $(seq "$n"); do
        if on_node "$k" info --format '{{range $name, $_ := .Runtimes}}{{$name}} {{end}}' | grep -qw runsc; then
            id=$(on_node "$k" info --format '{{.Swarm.NodeID}}')
            on_node 1 node update --label-add impyard.runsc=true "$id" >/dev/null
            labelled=$((labelled + 1))
        fi
    done
    step_end "labels: impyard.runsc=true on $labelled node(s)"

    local to_load=(impyard-box:latest)
    if docker image inspect impyard-node:latest >/dev/null 2>&1; then
        to_load+=(impyard-node:latest)
    else
        echo "lab: impyard-node:latest is not built (scripts/build-node-image.sh); skipped"
    fi
    load_images "$n" "${to_load[@]}" "${images[@]}"

    step_begin
    echo "$home" >"$LAB/home"
    lab_deploy "$home"
    step_end "deploy: data root $home"
    trap - EXIT
    echo "lab: up: $n node(s); node 1 is $(node_sock 1)"
}

main() {
    [ $# -ge 1 ] || usage
    local cmd=$1
    shift
    case $cmd in
    up) cmd_up "$@" ;;
    pids) [ $# = 0 ] || usage "pids takes no arguments"; cmd_pids ;;
    down) [ $# = 0 ] || usage "down takes no arguments"; cmd_down ;;
    *) usage "unknown command '$cmd'" ;;
    esac
}

main "$@"
