# The Gemini CLI's part of scripts/build-agent-box.sh (sourced by it): @google/gemini-cli
# pinned to box/gemini/VERSION from the npm registry into the staging tree
# (--ignore-scripts: no install script from the registry runs on this host). The package
# is its own esbuild bundle (bundle/gemini.js and its chunks, no node_modules to
# resolve), so it is used as shipped. Its optional dependencies are left out: keytar
# (a keychain the box has no use for: the key is a placeholder) and node-pty (the
# adapter runs shell commands without a pseudo-terminal).
# In: $top, $python, $work, $staging, $agent_version. Out: /opt/gemini in the staging tree.

agent_packages=""

stage_agent() {
    echo "build-agent-box: Gemini CLI $agent_version from npm"
    npm install --global --prefix "$staging/opt/gemini" --cache "$work/npm-cache" \
        --ignore-scripts --omit=dev --omit=optional --no-audit --no-fund \
        --no-update-notifier --loglevel=error \
        "@google/gemini-cli@$agent_version" >/dev/null
    local package="$staging/opt/gemini/lib/node_modules/@google/gemini-cli"
    [ -f "$package/bundle/gemini.js" ] || {
        echo "build-agent-box: the Gemini CLI package has no bundle/gemini.js; recheck its layout" >&2
        exit 1
    }
    ln -sfn "../lib/node_modules/@google/gemini-cli/bundle/gemini.js" "$staging/opt/gemini/bin/gemini"
}
