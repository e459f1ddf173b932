"""The gate a ready box waits at: the box's first process until a run claims the box.

It waits for the claim file in the box's read-only signal dir, then sources it: the claim
exports the run's environment and execs the run's command, so that command is the box's
own first process. It polls (inotify does not see host writes through gVisor's gofer)
without forking: a ``sleep`` per poll cost an idle runsc box half a core, ``read -t`` on a
private fifo (gone from /tmp before the run starts; it waits since nothing writes to it)
costs next to nothing. Under gVisor each wake-up still costs its kernel's timers:
measured idle, 5 ms polls took 10% of a core there (5% at 20 ms), 0.6% under runc; so a
runsc box polls every 20 ms.

``read -t`` is not POSIX: busybox ash and bash have it, dash (``/bin/sh`` of the Debian
agent images) refuses it at once, and a gate looping on that refusal spun a whole core
(an idle Pi box slowed every other run on the host). So the gate runs under bash where
the image has one, and where neither has ``read -t`` it falls back to a ``sleep`` per
poll, every 100 ms.
"""

from __future__ import annotations

from impyard.box.spec import Runtime
from impyard.gateway.wiring.boxside import BOX_SIGNAL_DIR

CLAIM_FILE = "claim"

_GATE = """mkfifo /tmp/.warm-gate && exec 3<>/tmp/.warm-gate && rm -f /tmp/.warm-gate || exit 125
while [ ! -e {claim} ]; do
    read -t {poll} _ <&3 2>/dev/null
    [ $? -ne 2 ] || sleep 0.1
done
exec 3<&-
. {claim}
echo "warm gate: the claim did not start a command" >&2
exit 125
"""
#: Runs the gate (its first argument) under bash when the image has it, else the shell's
#: own ``eval``.
_RUNNER = 'if [ -x /bin/bash ]; then exec /bin/bash -c "$1"; fi; eval "$1"'
POLL_SECONDS = {"runc": "0.005", "runsc": "0.02"}


def gate_command(runtime: Runtime) -> list[str]:
    """The ready box's entrypoint: the gate, polling as often as ``runtime`` affords."""
    gate = _GATE.format(claim=f"{BOX_SIGNAL_DIR}/{CLAIM_FILE}", poll=POLL_SECONDS[runtime])
    return ["/bin/sh", "-c", _RUNNER, "warm-gate", gate]
