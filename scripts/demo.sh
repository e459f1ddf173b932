#!/usr/bin/env bash
# The demo: build everything, then show the tmpfs container primitive verified.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
bash scripts/bootstrap.sh
impyard=.venv/bin/impyard
export IMPYARD_HOME=${IMPYARD_HOME:-$(mktemp -d /tmp/impyard-demo.XXXXXX)}
echo "demo data root: $IMPYARD_HOME"
"$impyard" init
"$impyard" check box
