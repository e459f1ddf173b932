# The Pi agent's part of scripts/build-agent-box.sh (sourced by it): Pi pinned to
# box/pi/VERSION from the npm registry into the staging tree (--ignore-scripts: no install
# script from the registry runs on this host), its CLI bundled with esbuild (pinned below)
# into one ESM file plus lazily loaded chunks, run as nobody (65534), and `pi` pointed at
# the bundle: node then opens a handful of modules at start-up instead of about 1,500
# (faster, most of all under gVisor, where every file open is costly).
# In: $top, $python, $work, $staging, $agent_version. Out: /opt/pi in the staging tree.

agent_packages=""
esbuild_version=0.28.2

stage_agent() {
    echo "build-agent-box: Pi $agent_version from npm"
    npm install --global --prefix "$staging/opt/pi" --cache "$work/npm-cache" \
        --ignore-scripts --omit=dev --no-audit --no-fund --no-update-notifier --loglevel=error \
        "@mariozechner/pi-coding-agent@$agent_version" >/dev/null

    echo "build-agent-box: bundling Pi's CLI with esbuild $esbuild_version"
    pi_package="$staging/opt/pi/lib/node_modules/@mariozechner/pi-coding-agent"
    pi_ai="$pi_package/node_modules/@mariozechner/pi-ai"
    # The bundle lives inside Pi's package, as deep under it as Pi's own modules, so
    # what Pi finds relative to itself still resolves: its package.json, themes,
    # templates and docs (config.js walks up to package.json), the extension aliases
    # (loader.js: ../../index.js) and, through node_modules, every external below.
    bundle_dir=dist/impyard/bundle
    pi_entry=$("$python" -c 'import json, sys; print(json.load(open(sys.argv[1]))["bin"]["pi"])' \
        "$pi_package/package.json")
    [ -f "$pi_package/$pi_entry" ] || {
        echo "build-agent-box: Pi's bin entry $pi_entry is missing" >&2
        exit 1
    }
    # pi-ai loads some providers by a computed specifier, which no bundler follows:
    # each becomes an entry of its own, written where the specifier points (the
    # bundle directory, next to the chunk that imports it). None found means Pi
    # changed how it loads them: fail rather than ship a bundle missing one.
    lazy_providers=$(grep -o 'importNodeOnlyProvider("\./[a-z0-9-]*\.js")' \
        "$pi_ai/dist/providers/register-builtins.js" | sed 's/.*"\.\/\(.*\)\.js")/\1/' | sort -u)
    if [ -z "$lazy_providers" ]; then
        echo "build-agent-box: no provider loaded by a computed import found in pi-ai; recheck the bundle" >&2
        exit 1
    fi
    entries=("cli=$pi_entry")
    for provider in $lazy_providers; do
        entries+=("$provider=node_modules/@mariozechner/pi-ai/dist/providers/$provider.js")
    done
    npm install --prefix "$work/esbuild" --cache "$work/npm-cache" \
        --ignore-scripts --no-audit --no-fund --no-update-notifier --loglevel=error \
        "esbuild@$esbuild_version" >/dev/null
    # esbuild's binary is its platform package's (installed as an optional dependency).
    mapfile -t esbuild_bins < <(find "$work/esbuild/node_modules/@esbuild" -path '*/bin/esbuild' -type f)
    if [ ${#esbuild_bins[@]} -ne 1 ]; then
        echo "build-agent-box: expected one esbuild platform binary, found ${#esbuild_bins[@]}" >&2
        exit 1
    fi
    # Nothing from the registry runs as root: esbuild runs as nobody, reading the
    # staging tree and writing only its own output directory.
    chmod 0711 "$work"
    mkdir "$work/bundle"
    chown 65534:65534 "$work/bundle"
    # External: native addons (.node, koffi, clipboard), photon (wasm beside its own
    # file), OpenTelemetry (optional, partly not installed) and proxy-agent (only the
    # Bedrock provider loads it, and its QuickJS module reads __dirname, which an ESM
    # bundle lacks); each is resolved from Pi's node_modules when, if ever, loaded.
    # The banner gives bundled CommonJS code a real require for Node's own modules.
    (cd "$pi_package" && setpriv --reuid=65534 --regid=65534 --clear-groups \
        "${esbuild_bins[0]}" "${entries[@]}" \
        --bundle --splitting --platform=node --format=esm --target=node20.19 \
        --outdir="$work/bundle/out" --log-level=warning \
        --external:'*.node' --external:koffi --external:@mariozechner/clipboard \
        --external:@silvia-odwyer/photon-node --external:'@opentelemetry/*' \
        --external:proxy-agent \
        '--banner:js=import { createRequire as __impyardRequire } from "node:module"; const require = __impyardRequire(import.meta.url);')
    for provider in cli $lazy_providers; do
        [ -s "$work/bundle/out/$provider.js" ] || {
            echo "build-agent-box: the bundle lacks $provider.js" >&2
            exit 1
        }
    done
    mkdir -p "$pi_package/$(dirname "$bundle_dir")"
    cp -r "$work/bundle/out" "$pi_package/$bundle_dir"
    ln -sfn "../lib/node_modules/@mariozechner/pi-coding-agent/$bundle_dir/cli.js" "$staging/opt/pi/bin/pi"
}
