# Claude Code's part of scripts/build-agent-box.sh (sourced by it): Claude Code pinned to
# box/claude-code/VERSION from the npm registry into the staging tree (--ignore-scripts: no
# install script from the registry runs on this host). The package is a stub; the CLI is
# one native executable (a compiled JavaScript runtime with Claude Code inside) shipped as
# the platform's optional dependency, which the package's postinstall would link over the
# stub. Here `claude` is linked to it instead. Nothing to bundle: node is not involved at
# run time, and start-up opens one file.
# In: $top, $python, $work, $staging, $agent_version. Out: /opt/claude-code in the staging tree.

agent_packages=""

stage_agent() {
    echo "build-agent-box: Claude Code $agent_version from npm"
    npm install --global --prefix "$staging/opt/claude-code" --cache "$work/npm-cache" \
        --ignore-scripts --omit=dev --no-audit --no-fund --no-update-notifier --loglevel=error \
        "@anthropic-ai/claude-code@$agent_version" >/dev/null

    local package="$staging/opt/claude-code/lib/node_modules/@anthropic-ai/claude-code"
    local arch
    case $(uname -m) in
    x86_64) arch=x64 ;;
    aarch64) arch=arm64 ;;
    *)
        echo "build-agent-box: no Claude Code build for $(uname -m)" >&2
        exit 1
        ;;
    esac
    # The image is Debian (glibc): the platform package without the -musl suffix.
    local native="node_modules/@anthropic-ai/claude-code-linux-$arch/claude"
    [ -f "$package/$native" ] || {
        echo "build-agent-box: Claude Code's native executable $native is missing" >&2
        exit 1
    }
    local version
    version=$("$python" -c 'import json, sys; print(json.load(open(sys.argv[1]))["version"])' \
        "$package/${native%/claude}/package.json")
    [ "$version" = "$agent_version" ] || {
        echo "build-agent-box: Claude Code's native package is $version, not $agent_version" >&2
        exit 1
    }
    chmod 0755 "$package/$native"
    ln -sfn "../lib/node_modules/@anthropic-ai/claude-code/$native" "$staging/opt/claude-code/bin/claude"
}
