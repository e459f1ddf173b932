#!/usr/bin/env bash
# timed.sh PART COMMAND...: run COMMAND, then say how long PART took (and keep its status),
# so a CI log shows what each part of the test command costs.
set -uo pipefail
part=$1
shift
started=$(date +%s)
"$@"
status=$?
echo "==> $part: $(($(date +%s) - started)) s (exit $status)"
exit "$status"
