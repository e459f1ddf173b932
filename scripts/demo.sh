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
