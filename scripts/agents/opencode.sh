# The OpenCode agent's part of scripts/build-agent-box.sh (sourced by it): opencode-ai
# pinned to box/opencode/VERSION from the npm registry into the staging tree
# (--ignore-scripts: no install script from the registry runs on this host). The package
# is a launcher whose postinstall links the CLI, a single native executable shipped in an
# optional dependency per platform (opencode-linux-x64, -baseline, -musl, ...); with
# install scripts off that link is made here: the x64 baseline build (no AVX2 needed, so
# the image runs on any x86-64 host) or the arm64 build, moved to where the launcher's
# bin points, and every platform package removed (each is about 180 MB).
# ripgrep from Debian: OpenCode's grep and glob tools use `rg` from PATH, and download it
# from GitHub at run time when it is missing.
# In: $top, $python, $work, $staging, $agent_version. Out: /opt/opencode in the staging tree.

agent_packages="ripgrep"

stage_agent() {
    echo "build-agent-box: OpenCode $agent_version from npm"
    npm install --global --prefix "$staging/opt/opencode" --cache "$work/npm-cache" \
        --ignore-scripts --omit=dev --no-audit --no-fund --no-update-notifier --loglevel=error \
        "opencode-ai@$agent_version" >/dev/null

    package="$staging/opt/opencode/lib/node_modules/opencode-ai"
    case $(uname -m) in
    x86_64) platform=opencode-linux-x64-baseline ;;
    aarch64) platform=opencode-linux-arm64 ;;
    *)
        echo "build-agent-box: OpenCode ships no Linux build for $(uname -m)" >&2
        exit 1
        ;;
    esac
    native="$package/node_modules/$platform/bin/opencode"
    if [ ! -f "$native" ] || [ -L "$native" ]; then
        echo "build-agent-box: $platform did not install its executable ($native)" >&2
        exit 1
    fi
    # The launcher's bin (bin/opencode.exe, on every platform) is a stub that says the
    # postinstall did not run; the executable takes its place.
    install -m 0755 "$native" "$package/bin/opencode.exe"
    rm -rf "$package/node_modules" "$package/postinstall.mjs"
    [ "$(readlink "$staging/opt/opencode/bin/opencode")" = ../lib/node_modules/opencode-ai/bin/opencode.exe ] || {
        echo "build-agent-box: npm did not link bin/opencode to the launcher's bin" >&2
        exit 1
    }
}
