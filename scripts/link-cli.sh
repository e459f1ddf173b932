#!/usr/bin/env bash
# Put `impyard` on every new shell's PATH: link /usr/local/bin/impyard (on a login
# shell's default PATH) to the .venv/bin/impyard of the checkout bootstrapped last.
# Usage: link-cli.sh [CHECKOUT] (default: the checkout holding this script).
#
# Only a name nothing else owns is taken: a missing one, or a link a bootstrap made (one
# to some checkout's .venv/bin/impyard, which a new clone repoints to itself). Anything
# else there (a pip-installed impyard, another tool's link) is left alone and named.
# Without write access to the directory (not root), nothing is linked and the way to
# run impyard is said instead. IMPYARD_LINK_DIR replaces /usr/local/bin (tests).
set -euo pipefail

top=$(cd "${1:-$(dirname "$0")/..}" && pwd)
target="$top/.venv/bin/impyard"
dir=${IMPYARD_LINK_DIR:-/usr/local/bin}
link="$dir/impyard"
instead="run $target, or add $top/.venv/bin to PATH"
current=""

if [ ! -x "$target" ]; then
    echo "link-cli: no $target to link (scripts/bootstrap.sh creates .venv first)" >&2
    exit 1
fi
if [ -L "$link" ]; then
    current=$(readlink "$link")
    if [ "$current" = "$target" ]; then
        exit 0 # already this checkout's: quiet, as a finished bootstrap is
    fi
    case "$current" in
    /*/.venv/bin/impyard) ;; # a bootstrap's link to another checkout: repointed below
    *)
        echo "bootstrap: $link links to $current, not an Impyard checkout: left alone; $instead" >&2
        exit 0
        ;;
    esac
elif [ -e "$link" ]; then
    echo "bootstrap: $link exists and is not a link a bootstrap made: left alone; $instead" >&2
    exit 0
fi
if [ ! -w "$dir" ]; then
    echo "bootstrap: cannot write $dir (not root?), so impyard is not linked there; $instead"
    exit 0
fi
# A new link renamed over the name: a shell never sees it missing or half made.
tmp="$dir/.impyard-link.$$"
ln -sfn "$target" "$tmp"
mv -Tf "$tmp" "$link"
echo "bootstrap: linked $link -> $target${current:+ (was -> $current)}: impyard works in any new shell"
