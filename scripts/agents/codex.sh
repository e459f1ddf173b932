# The Codex agent's part of scripts/build-agent-box.sh (sourced by it): Codex pinned to
# box/codex/VERSION from the npm registry into the staging tree (--ignore-scripts: no
# install script from the registry runs on this host). The package is a node launcher
# plus, as an optional dependency npm installs with it, a platform package holding the
# native binary (Rust, statically linked against musl); `codex` is linked to that binary
# directly, so no node process stands between agent-render and Codex.
# In: $top, $python, $work, $staging, $agent_version. Out: /opt/codex in the staging tree.

agent_packages=""

stage_agent() {
    echo "build-agent-box: Codex $agent_version from npm"
    npm install --global --prefix "$staging/opt/codex" --cache "$work/npm-cache" \
        --ignore-scripts --omit=dev --no-audit --no-fund --no-update-notifier --loglevel=error \
        "@openai/codex@$agent_version" >/dev/null

    local package="$staging/opt/codex/lib/node_modules/@openai/codex"
    local triple platform
    case $(uname -m) in
    x86_64) triple=x86_64-unknown-linux-musl platform=linux-x64 ;;
    aarch64) triple=aarch64-unknown-linux-musl platform=linux-arm64 ;;
    *)
        echo "build-agent-box: Codex ships no binary for $(uname -m)" >&2
        exit 1
        ;;
    esac
    # Where the launcher (bin/codex.js) looks: the platform package, else vendor/ in
    # the package itself.
    local binary=""
    for candidate in \
        "$package/node_modules/@openai/codex-$platform/vendor/$triple/bin/codex" \
        "$package/vendor/$triple/bin/codex"; do
        if [ -f "$candidate" ] && [ ! -L "$candidate" ]; then
            binary=$candidate
            break
        fi
    done
    if [ -z "$binary" ]; then
        echo "build-agent-box: npm installed no Codex binary for $triple (optional dependency @openai/codex-$platform missing)" >&2
        exit 1
    fi
    chmod 0755 "$binary"
    # Relative to /opt/codex/bin, where the link lives.
    ln -sfn "../${binary#"$staging/opt/codex/"}" "$staging/opt/codex/bin/codex"
}
