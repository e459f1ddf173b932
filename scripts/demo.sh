#!/usr/bin/env bash
# The demo: set everything up, verify the tmpfs primitive, then let an imp learn
# two things (an append run and a reorganize run) and show what landed in Git.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
bash scripts/bootstrap.sh
impyard() { "$top/.venv/bin/impyard" "$@"; }
export IMPYARD_HOME=${IMPYARD_HOME:-$(mktemp -d /var/tmp/impyard-demo.XXXXXX)}
echo "== data root: $IMPYARD_HOME"
impyard init
impyard deploy
echo "== the tmpfs container primitive"
impyard check box
echo "== an imp and two runs"
impyard imp create yuko
impyard run yuko --prompt "Acme SSO supports SAML and OIDC; see the vendor docs."
impyard run yuko --reorganize --prompt "Rebuild the index of everything known."
echo "== git log of the canonical repository"
git -C "$(impyard knowledge yuko)" log --oneline
echo "== organization/index.md"
git -C "$(impyard knowledge yuko)" show main:organization/index.md
echo "== runs"
impyard runs list

echo "== a real agent: Pi in impyard-pi:latest"
impyard check box --image impyard-pi:latest
model=${IMPYARD_DEMO_MODEL:-gpt-4o-mini}
if [ -n "${IMPYARD_SECRET_LLM:-}" ] && [ -n "${IMPYARD_LLM_UPSTREAM:-}" ]; then
    upstream=$IMPYARD_LLM_UPSTREAM
    private=""
    echo "== model: $model at $upstream (your provider; the key stays on this host)"
else
    # No provider configured: the scripted model server plays the model. It speaks the
    # same protocol (streamed chat completions with tool calls), so Pi, the gateway and
    # the knowledge pipeline are all real; only the answers are scripted.
    fifo=$(mktemp -u)
    mkfifo "$fifo"
    "$top/.venv/bin/python" -m impyard.devtools.model_server >"$fifo" &
    server=$!
    trap 'kill "$server" 2>/dev/null || true; rm -f "$fifo"' EXIT
    read -r upstream <"$fifo"
    private="allow_private = true" # the scripted server listens on loopback
    model=scripted-model
    export IMPYARD_SECRET_LLM=demo-placeholder-key
    echo "== NOTE: IMPYARD_SECRET_LLM and IMPYARD_LLM_UPSTREAM are not both set, so this"
    echo "== run uses the SCRIPTED model server at $upstream (impyard/devtools/model_server/),"
    echo "== not a real model. Set both (e.g. IMPYARD_LLM_UPSTREAM=https://api.openai.com)"
    echo "== and optionally IMPYARD_DEMO_MODEL to talk to your provider."
fi
cat >>"$IMPYARD_HOME/policy/org.toml" <<TOML

[box.env]
IMPYARD_MODEL = "$model"

[[gateway.route]]
name = "llm"
upstream = "$upstream"
header = "Authorization"
value = "Bearer {secret}"
secret_env = "IMPYARD_SECRET_LLM"
methods = ["POST"]
$private
TOML
impyard deploy
impyard imp create pia --agent pi
impyard task add pia --prompt "Find out what a tmpfs is and write one note about it."
impyard serve --once
git -C "$(impyard knowledge pia)" log --stat -1

# Where everything is, and what to type next: from any new shell (bootstrap put
# `impyard` on PATH), --home names this demo's data root.
home=$(printf %q "$IMPYARD_HOME")
echo "== done: the demo's data root is $IMPYARD_HOME"
echo "== try next:"
echo "   impyard --home $home status  # engine, images, queue, runs, problems"
echo "   impyard --home $home runs show last  # what the last run did, and why"
echo "   impyard --home $home web --print-url  # a login URL for the console (then: impyard --home $home web)"
