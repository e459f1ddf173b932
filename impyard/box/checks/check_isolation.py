"""The rows of ``impyard check box`` about what a box can reach and what guards it: the
gateway and nothing else, its capabilities and seccomp state, and under gVisor (runsc)
that the kernel is gVisor's and how /tmp's nosuid,nodev is kept there.

The network probe box runs as a run's box does (``--network none``, no capabilities,
no-new-privileges, the box user) from ``impyard-box:latest``, whose busybox has the
probes; what it can reach is the runtime's and the namespace's doing, not the image's.
The host opens a listener in the box's network namespace (as the gateway does) and one
on its own loopback; the box must reach the first and nothing else.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from pathlib import Path

from impyard.box.checks.checkrow import Check, CheckRunError
from impyard.common.contract import DEFAULT_IMAGE, DEFAULT_USER
from impyard.gateway.wiring.netns import listen_in_netns

#: What the listener in the box's namespace answers; the box must read it back.
MARKER = "impyard-check-gateway"
GATEWAY_PORT = 3128
#: How long the box waits for the listener before it gives up (tenths of a second).
WAIT_TENTHS = 100

NETWORK_SCRIPT = """\
i=0
while ! wget -q -O /tmp/gw http://127.0.0.1:{gw}/ 2>/dev/null; do
  i=$((i+1)); [ $i -ge {wait} ] && break; sleep 0.1
done
echo "@gateway $(cat /tmp/gw 2>/dev/null)"
probe() {{
  name=$1; shift
  if out=$("$@" 2>&1); then echo "@$name open $out"
  else echo "@$name closed $(echo "$out" | tail -n 1)"; fi
}}
probe hostport wget -q -O - http://127.0.0.1:{host}/
probe ipv4 wget -q -O - http://192.0.2.1/
probe ipv6 wget -q -O - "http://[2001:db8::1]/"
probe ipv6lo wget -q -O - "http://[::1]:{gw}/"
probe dns nslookup example.com
probe raw ping -c 1 127.0.0.1
echo "@routes $(tail -n +2 /proc/net/route | grep -c .)"
echo "@routes6 $(cat /proc/net/ipv6_route 2>/dev/null | grep -v ' lo$' | grep -c .)"
grep -E '^(CapEff|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status | sed 's/^/@/; s/:[[:space:]]*/ /'
echo "@kernel $(uname -r)"
echo "@dmesg $(dmesg 2>/dev/null | head -n 1 | sed 's/^[^]]*] *//')"
"""
#: Paths the box tries besides the gateway, with what each means to an owner.
PATHS = {
    "hostport": "a host loopback port",
    "ipv4": "an IPv4 address (192.0.2.1)",
    "ipv6": "an IPv6 literal (2001:db8::1)",
    "ipv6lo": "the gateway port on ::1",
    "dns": "DNS (nslookup)",
    "raw": "a raw socket (ping)",
}

#: Appended to the primitive's probe under runsc: does a setuid file or a device node in
#: /tmp do anything, where gVisor's /proc/mounts does not say nosuid,nodev.
GVISOR_TMP_PROBE = """\
if cp /bin/sh /tmp/suid 2>/dev/null && chmod 4755 /tmp/suid 2>/dev/null; then
  if /tmp/suid -c true 2>/dev/null; then echo "@suidexec ran"; else echo "@suidexec refused"; fi
else echo "@suidexec nofile"; fi
if mknod /tmp/hostdisk b 7 0 2>/dev/null; then
  if head -c 1 /tmp/hostdisk >/dev/null 2>&1; then echo "@devnode opened"
  else echo "@devnode refused"; fi
else echo "@devnode nomknod"; fi
"""


class _Listener:
    """Answers every connection with MARKER until closed (one thread per listener)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.port = int(sock.getsockname()[1])
        self._thread = threading.Thread(target=self._serve, name="check-listener", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(2)
                with contextlib.suppress(OSError):
                    conn.recv(4096)
                    conn.sendall(f"HTTP/1.0 200 OK\r\n\r\n{MARKER}\n".encode())

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self._thread.join(2)


def _host_listener() -> _Listener:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    return _Listener(sock)


def _proc_status(pid: int) -> dict[str, str]:
    """Seccomp and NoNewPrivs of a host process (empty when unreadable: a remote engine)."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return {}
    wanted = ("Seccomp", "NoNewPrivs")
    return {
        k: v.strip()
        for k, _, v in (line.partition(":") for line in text.splitlines())
        if k in wanted
    }


def network_probe(runtime: str, labels: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """Run the probe box; its ``@key value`` facts, and the host's view of its first
    process (under runsc: gVisor's sandbox)."""
    from python_on_whales import DockerClient
    from python_on_whales.exceptions import DockerException

    docker = DockerClient()
    host = _host_listener()
    container = None
    inside: _Listener | None = None
    try:
        script = NETWORK_SCRIPT.format(gw=GATEWAY_PORT, host=host.port, wait=WAIT_TENTHS)
        try:
            container = docker.run(
                DEFAULT_IMAGE,
                ["-c", script],
                entrypoint="/bin/sh",
                detach=True,
                networks=["none"],
                runtime=runtime,
                cap_drop=["ALL"],
                security_options=["no-new-privileges"],
                user=DEFAULT_USER,
                tmpfs=["/tmp:rw,nosuid,nodev,size=16m,mode=1777"],
                pull="never",
                labels=labels,
            )
        except DockerException as exc:
            raise CheckRunError(DEFAULT_IMAGE, exc.return_code, exc.stderr or "") from exc
        assert not isinstance(container, str | bytes)
        pid = int(docker.container.inspect(container).state.pid or 0)
        host_view = _proc_status(pid) if pid else {}
        if pid:
            inside = _Listener(listen_in_netns(pid, "127.0.0.1", GATEWAY_PORT))
        docker.container.wait(container)
        output = docker.container.logs(container)
    finally:
        if inside is not None:
            inside.close()
        host.close()
        if container is not None:
            with contextlib.suppress(DockerException):
                docker.container.remove(container, force=True)
    facts: dict[str, str] = {}
    for line in str(output).splitlines():
        if line.startswith("@"):
            key, _, value = line[1:].partition(" ")
            facts[key] = value.strip()
    return facts, host_view


REACH_ROW = "the gateway is reachable and nothing else is"
CAPS_ROW = "no capabilities inside"
SECCOMP_ROW = "seccomp filters the box's system calls"
GVISOR_SECCOMP_ROW = "system calls meet gVisor, which is seccomp-filtered (gVisor)"
KERNEL_ROW = "kernel is gVisor"
GVISOR_TMP_ROW = "no setuid or device files in /tmp (gVisor)"
GVISOR_INFO_ROW = "/tmp usage and OOM kills (info)"


def network_row_names(runtime: str) -> list[str]:
    """The names of ``network_rows``, in order, before the box runs."""
    gvisor = runtime == "runsc"
    names = [REACH_ROW, CAPS_ROW, GVISOR_SECCOMP_ROW if gvisor else SECCOMP_ROW]
    return [KERNEL_ROW, *names] if gvisor else names


def network_rows(runtime: str, labels: dict[str, str]) -> list[Check]:
    facts, host_view = network_probe(runtime, labels)
    rows = [_reach_row(facts), _caps_row(facts), _seccomp_row(runtime, facts, host_view)]
    if runtime == "runsc":
        rows.insert(0, _kernel_row(facts))
    return rows


def _reach_row(facts: dict[str, str]) -> Check:
    gateway = facts.get("gateway", "")
    problems = [] if gateway == MARKER else [f"the gateway listener answered {gateway!r}"]
    refused = []
    for key, what in PATHS.items():
        state, _, why = facts.get(key, "unknown").partition(" ")
        if state == "closed":
            refused.append(f"{what}: {why or 'refused'}")
        else:
            problems.append(f"{what} is {state}: {why}")
    routes = (facts.get("routes", "?"), facts.get("routes6", "?"))
    if routes != ("0", "0"):
        problems.append(f"routes: {routes[0]} IPv4, {routes[1]} IPv6 (want none)")
    detail = (
        "; ".join(problems)
        if problems
        else (f"127.0.0.1:{GATEWAY_PORT} answered; no route; refused: " + "; ".join(refused))
    )
    return Check(REACH_ROW, not problems, detail)


def _caps_row(facts: dict[str, str]) -> Check:
    eff, bnd = facts.get("CapEff", "?"), facts.get("CapBnd", "?")
    ok = eff.strip("0") == "" and eff != ""
    return Check(CAPS_ROW, ok, f"CapEff {eff}, CapBnd {bnd}")


def _seccomp_row(runtime: str, facts: dict[str, str], host_view: dict[str, str]) -> Check:
    inside = facts.get("Seccomp", "?")
    if runtime != "runsc":
        return Check(
            SECCOMP_ROW,
            inside == "2",
            f"Seccomp {inside} inside (2: the engine's default profile), NoNewPrivs "
            f"{facts.get('NoNewPrivs', '?')}",
        )
    outer, nnp = host_view.get("Seccomp", "?"), host_view.get("NoNewPrivs", "?")
    return Check(
        GVISOR_SECCOMP_ROW,
        outer == "2" and nnp == "1",
        f"Seccomp {inside} inside (gVisor's kernel serves the box's calls; the engine's "
        f"profile does not apply there); on the host the sandbox runs with Seccomp {outer}, "
        f"NoNewPrivs {nnp}",
    )


def _kernel_row(facts: dict[str, str]) -> Check:
    kernel, dmesg = facts.get("kernel", ""), facts.get("dmesg", "")
    ok = "gVisor" in dmesg
    return Check(KERNEL_ROW, ok, f"uname -r {kernel or '?'}; dmesg: {dmesg or '?'}")


def gvisor_tmp_row(facts: dict[str, str]) -> Check:
    """Under runsc, in place of "mounted nosuid,nodev": gVisor's /proc/mounts does not list
    those options, so what they prevent is tried instead."""
    line = facts.get("mount", "") or "no /tmp entry in /proc/mounts"
    suid, dev = facts.get("suidexec", "?"), facts.get("devnode", "?")
    ok = suid in ("refused", "nofile") and dev in ("refused", "nomknod")
    return Check(
        GVISOR_TMP_ROW,
        ok,
        f"/proc/mounts: {line} (gVisor lists no nosuid,nodev); a setuid file there: {suid}; "
        f"a block device node there: {dev} (gVisor's kernel has no host devices)",
    )


def gvisor_info_rows() -> list[Check]:
    """What works differently under gVisor, said where an owner checks the box."""
    return [
        Check(
            GVISOR_INFO_ROW,
            True,
            "gVisor: tmpfs lives in the sandbox's memory: the host sees /tmp and the "
            "processes as one figure, so an OOM kill is reported with the box's total, "
            "not blamed on /tmp",
        )
    ]
