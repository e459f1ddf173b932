"""TLS inspection cost: an inspected HTTPS tunnel through the gateway beside a plain one.

    python -m bench.inspect_bench [--mb 200] [--repeat 3] [--samples 50] [--no-chunked]

With ``gateway.inspect_tls`` on (the default), an allowed ``CONNECT`` is terminated
with a leaf of the data root's CA, and every request inside is judged and forwarded
over a fresh TLS connection the gateway makes and verifies itself; the body is
decrypted, hashed for its fetch receipt and encrypted again on its way to the box.
Off, the tunnel is a host:port byte copy. This bench puts a number on what inspection
costs, for the three things a box notices:

1. **Throughput** of one large download (``--mb``, default 200 MB; an MB is 10^6
   bytes) over HTTPS through the gateway: inspected (the client trusts the gateway's
   CA) and direct (a plain tunnel; the client trusts the upstream's own CA). Median
   MB/s of ``--repeat``
   downloads per mode, the two modes alternating so drift in the machine's speed
   falls on both. Target: inspected at least 0.5x direct. Unless ``--no-chunked``, the
   same again with the upstream answering chunked (no Content-Length), which the
   gateway relays re-chunked.
2. **Added latency** of a small request: ``--samples`` sequential fresh connections
   per mode (alternating), each timed from ``connect()`` to the last byte of a 1 KB
   page: TCP to the gateway, ``CONNECT``, the TLS handshake, the GET. In inspected
   mode that includes the gateway's own TCP and TLS handshake to the upstream and its
   per-request bookkeeping before the answer (the daily request counter). The second
   GET on the same connection (keep-alive inside the tunnel) is timed too: inspected,
   it still costs the gateway a fresh upstream connection and TLS handshake, and the
   previous request's receipt and journal line (each fsynced) are written first.
   Medians, p90 and minimum; the difference inspected - direct is the added latency
   (of the medians, and of the minimums: the floor without any stall). The count of
   samples at or over 35 ms shows how many waited out a delayed ACK (40 ms on Linux):
   what a response written in pieces (the TLS session tickets, then the head, then
   the body) costs when a socket on its way keeps Nagle's algorithm on. The upstream
   here turns it off (``disable_nagle_algorithm``), as servers commonly do, so such a
   stall is the gateway's.
3. **Gateway memory**: the gateway runs alone in a child process (``gateway_child``,
   started with ``python -c``), so its ``/proc/<pid>/status`` describes the gateway
   and nothing else. Before every large download its peak (VmHWM) is reset to its
   current RSS (``clear_refs`` 5) and VmRSS is read; after it, VmHWM is the download's
   peak (a 10 ms sampler of VmRSS backs this up where the reset is not permitted).
   Growth = peak - RSS before. Target: < 50 MB for a 200 MB body, which holds only if
   the body streams a piece at a time and is never held whole. The gateway's CPU time
   per download is read from ``/proc/<pid>/stat`` as well: on a small machine it shows
   which process the throughput is waiting for.

Processes: the client is this process; the upstream (``upstream_child``: a Python
HTTPS server on 127.0.0.2 with a CA of its own, made by ``tests.tls_server``, that
generates the body on the fly in 64 KiB pieces, with Content-Length or chunked) and
each mode's gateway are children of their own, so none of them shares a GIL with
another and the gateway's RSS is its own. Each gateway has its own data root (a
``scratch_dir``) with a policy allowing GET to the upstream's 127.0.0.2:<port> and a
budget raised far past the defaults (``response_bytes_per_run`` defaults to 100 MiB).

After the run the journal and the receipts are checked: every request allowed, every
inspected download's receipt complete with the body's byte count and SHA-256, every
direct tunnel's byte count at least the bodies it carried; anything the gateways
logged to stderr is printed.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import http.client
import json
import logging
import os
import random
import shutil
import socket
import ssl
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import IO, Any
from urllib.parse import parse_qs, urlsplit

from bench.common import ROOT, median, print_table, scratch_dir

HOST = "127.0.0.2"
PIECE = 65536
SMALL_PAGE = (b"<html>" + b"x" * 1010 + b"</html>\n")[:1024]
RUN_ID = "run-20260711T120000Z-0123456789"
IMP = "bench"
LARGE = 10**13  # budgets that never refuse a bench request
MB = 1_000_000
THROUGHPUT_RATIO = 0.5
RSS_GROWTH_MB = 50.0
MODES = ("inspected", "direct")
STALL_MS = 35.0  # a sample this slow waited for a delayed ACK (40 ms on Linux)


def body_block() -> bytes:
    """The 64 KiB the upstream repeats: incompressible, the same in every process."""
    return random.Random(20260711).randbytes(PIECE)


def body_pieces(size: int) -> Iterator[bytes]:
    block = body_block()
    left = size
    while left > 0:
        piece = block if left >= PIECE else block[:left]
        left -= len(piece)
        yield piece


# ---------------------------------------------------------------- child processes


def _child_config() -> dict[str, Any]:
    config: dict[str, Any] = json.loads(sys.argv[1])
    return config


def upstream_child() -> None:
    """The upstream, in its own process: ``/big?bytes=N[&chunked=1]`` and ``/small``.

    Prints its port, serves until its stdin closes."""
    config = _child_config()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(config["leaf"], config["key"])

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # Headers and body are separate writes: with Nagle on, a small body waits for the
        # client's delayed ACK (40 ms), which is this server's cost, not the gateway's.
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: object) -> None:
            del format, args

        def do_GET(self) -> None:
            parts = urlsplit(self.path)
            if parts.path == "/small":
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(SMALL_PAGE)))
                self.end_headers()
                self.wfile.write(SMALL_PAGE)
                return
            if parts.path != "/big":
                self.send_error(404)
                return
            query = parse_qs(parts.query)
            size = int(query["bytes"][0])
            chunked = query.get("chunked") == ["1"]
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            if chunked:
                self.send_header("Transfer-Encoding", "chunked")
            else:
                self.send_header("Content-Length", str(size))
            self.end_headers()
            for piece in body_pieces(size):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
            if chunked:
                self.wfile.write(b"0\r\n\r\n")

    server = ThreadingHTTPServer((HOST, 0), Handler)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(server.server_address[1], flush=True)
    sys.stdin.read()
    server.shutdown()


def gateway_child() -> None:
    """One gateway, alone in its process: a loopback listener, ``Gateway.start``, ``serve``.

    Prints its port, serves until its stdin closes, then closes the gateway."""
    from impyard.gateway import Gateway
    from impyard.home import Home
    from impyard.journal.log import Journal
    from impyard.policy.models import GatewayPolicy

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    config = _child_config()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(128)
    port = listener.getsockname()[1]
    home = Home(Path(config["home"]))
    policy = GatewayPolicy.model_validate(
        {
            "port": port,
            "inspect_tls": config["inspect_tls"],
            "allow": [{"host": HOST, "ports": [config["upstream_port"]], "methods": ["GET"]}],
            "budget": {
                "requests_per_run": LARGE,
                "requests_per_imp_per_day": LARGE,
                "response_bytes_per_run": LARGE,
                "request_bytes_per_run": LARGE,
            },
        }
    )
    gateway = Gateway.start(
        policy,
        home=home,
        imp=IMP,
        run_id=RUN_ID,
        journal=Journal(home.journal),
        upstream_ca_file=config["upstream_ca"],
    )
    gateway.serve(listener)
    print(port, flush=True)
    sys.stdin.read()
    gateway.close()


@dataclass
class Child:
    """A child process started with ``python -c``: it prints its port, and ends when its
    stdin closes."""

    name: str
    process: subprocess.Popen[str]
    port: int
    stderr_path: Path

    @classmethod
    def start(cls, name: str, entry: str, config: dict[str, Any], stderr_path: Path) -> Child:
        code = f"from bench.inspect_bench import {entry}; {entry}()"
        with stderr_path.open("w") as stderr:
            process = subprocess.Popen(
                [sys.executable, "-c", code, json.dumps(config)],
                cwd=ROOT,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
            )
        assert process.stdout is not None
        line = process.stdout.readline()
        if not line.strip().isdigit():
            process.kill()
            process.wait()
            raise SystemExit(f"{name} did not start: {stderr_path.read_text()[-2000:]}")
        return cls(name, process, int(line), stderr_path)

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self) -> None:
        stdin: IO[str] | None = self.process.stdin
        if stdin is not None:
            stdin.close()
        try:
            self.process.wait(15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


# ---------------------------------------------------------------- /proc readings


def proc_status(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM of ``pid`` in bytes."""
    found: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            found[name] = int(value.split()[0]) * 1024
    return found


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of ``pid`` (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_idle(seconds: float = 1.0) -> float:
    """Percent of the machine's CPU time idle over the next ``seconds``."""

    def sample() -> tuple[int, int]:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        return fields[3] + fields[4], sum(fields)  # idle + iowait, total

    idle, total = sample()
    time.sleep(seconds)
    idle_after, total_after = sample()
    return 100 * (idle_after - idle) / max(1, total_after - total)


def reset_peak(pid: int) -> bool:
    """Set ``pid``'s VmHWM to its current RSS (Linux 4.0+); False if not permitted."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        return False
    return True


@dataclass
class MemoryWatch:
    """The gateway's RSS before a download, and its peak during it."""

    pid: int
    before: int = 0
    sampled_peak: int = 0
    reset: bool = False
    after: int = 0
    peak: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> MemoryWatch:
        self.reset = reset_peak(self.pid)
        self.before = proc_status(self.pid)["VmRSS"]
        self.sampled_peak = self.before
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(0.01):
            self.sampled_peak = max(self.sampled_peak, proc_status(self.pid)["VmRSS"])

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join()
        status = proc_status(self.pid)
        self.after = status["VmRSS"]
        self.peak = max(self.sampled_peak, status["VmHWM"] if self.reset else 0)

    @property
    def growth(self) -> int:
        return self.peak - self.before


# ---------------------------------------------------------------- the client side


@dataclass
class Mode:
    name: str
    gateway: Child
    upstream_port: int
    upstream_pid: int
    trust: ssl.SSLContext  # what the client verifies the tunnel's TLS with
    home: Path

    def connection(self) -> http.client.HTTPSConnection:
        conn = http.client.HTTPSConnection(
            "127.0.0.1", self.gateway.port, timeout=120, context=self.trust
        )
        conn.set_tunnel(HOST, self.upstream_port)
        return conn


@dataclass
class Download:
    mbps: float
    # CPU seconds / wall seconds of the gateway, the upstream and the client (this process)
    gateway_cpu: float
    upstream_cpu: float
    client_cpu: float
    growth: int  # gateway RSS growth in bytes
    rss_after: int
    hwm: bool  # the peak is VmHWM after a reset, not only the 10 ms samples


def download(mode: Mode, size: int, chunked: bool) -> Download:
    path = f"/big?bytes={size}" + ("&chunked=1" if chunked else "")
    buffer = memoryview(bytearray(1 << 20))
    conn = mode.connection()
    pid = mode.gateway.pid
    try:
        with MemoryWatch(pid) as memory:
            cpu_before = cpu_seconds(pid), cpu_seconds(mode.upstream_pid), time.process_time()
            start = time.perf_counter()
            conn.request("GET", path)
            response = conn.getresponse()
            if response.status != 200:
                raise SystemExit(f"{mode.name} GET {path}: {response.status}")
            received = 0
            while count := response.readinto(buffer):
                received += count
            elapsed = time.perf_counter() - start
            cpu_after = cpu_seconds(pid), cpu_seconds(mode.upstream_pid), time.process_time()
    finally:
        conn.close()
    if received != size:
        raise SystemExit(f"{mode.name} GET {path}: {received} bytes of {size}")
    gateway, upstream, client = (b - a for a, b in zip(cpu_before, cpu_after, strict=True))
    return Download(
        size / MB / elapsed,
        gateway / elapsed,
        upstream / elapsed,
        client / elapsed,
        memory.growth,
        memory.after,
        memory.reset,
    )


@dataclass
class Small:
    """ms of a fresh connection's first GET (connect, CONNECT, TLS, GET) and of a second
    GET on the same connection (keep-alive inside the tunnel)."""

    fresh: float
    reuse: float


def timed_get(conn: http.client.HTTPSConnection, path: str) -> tuple[bytes, float]:
    start = time.perf_counter()
    conn.request("GET", path)
    response = conn.getresponse()
    body = response.read()
    elapsed = (time.perf_counter() - start) * 1000
    if response.status != 200:
        raise SystemExit(f"GET {path}: {response.status} {body[:300]!r}")
    return body, elapsed


def small_requests(mode: Mode) -> Small:
    conn = mode.connection()  # connects on the first request: its time is in ``fresh``
    try:
        first, fresh = timed_get(conn, "/small")
        second, reuse = timed_get(conn, "/small")
    finally:
        conn.close()
    if first + second != SMALL_PAGE * 2:
        raise SystemExit(f"{mode.name}: /small answered {(first + second)[:200]!r}")
    return Small(fresh, reuse)


def stalled(samples: Sequence[float]) -> str:
    """How many samples waited out a delayed ACK (Linux: at least 40 ms)."""
    return f"{sum(1 for x in samples if x >= STALL_MS)}/{len(samples)}"


def p90(samples: Sequence[float]) -> float:
    return statistics.quantiles(samples, n=10, method="inclusive")[8]


# ---------------------------------------------------------------- checks after the run


def journal_check(mode: Mode, bodies: int) -> str:
    """What the gateway's journal (and receipts) say of the run, in one line."""
    from impyard.gateway.provenance.receipts import read_receipts
    from impyard.home import Home
    from impyard.journal.log import Journal

    home = Home(mode.home)
    entries = Journal(home.journal).read(event="gateway.request")
    decisions: dict[str, int] = {}
    for entry in entries:
        key = f"{entry['method']} {entry['decision']}"
        decisions[key] = decisions.get(key, 0) + 1
    summary = ", ".join(f"{key} x{count}" for key, count in sorted(decisions.items()))
    if mode.name == "inspected":
        receipts = read_receipts(home.run_receipts(RUN_ID)).values()
        incomplete = sum(1 for r in receipts if not r.complete)
        big = [r for r in receipts if "/big" in r.url]
        return f"{summary}; {len(receipts)} receipts, {incomplete} incomplete, {len(big)} large"
    tunneled = sum(int(e["bytes"]) for e in entries if e["method"] == "CONNECT")
    return f"{summary}; {tunneled / MB:.0f} MB tunnelled (>= {bodies / MB:.0f} MB of bodies)"


def receipt_hashes(mode: Mode, size: int) -> str:
    """Whether every large inspected body's receipt names its size and SHA-256."""
    from impyard.gateway.provenance.receipts import read_receipts
    from impyard.home import Home

    digest = hashlib.sha256()
    for piece in body_pieces(size):
        digest.update(piece)
    expected = digest.hexdigest()
    receipts = read_receipts(Home(mode.home).run_receipts(RUN_ID)).values()
    big = [r for r in receipts if "/big" in r.url]
    wrong = [r.id for r in big if (r.bytes, r.sha256, r.complete) != (size, expected, True)]
    return f"{len(big) - len(wrong)}/{len(big)} large receipts match size and sha256" + (
        f" (wrong: {', '.join(wrong[:5])})" if wrong else ""
    )


# ---------------------------------------------------------------- the bench


def start_modes(work: Path) -> tuple[Child, list[Mode]]:
    from impyard.gateway.wiring.ca import ca_certificate
    from impyard.home import Home
    from tests.tls_server import make_ca_and_leaf

    ca, leaf, key = make_ca_and_leaf(work / "upstream")
    upstream = Child.start(
        "upstream",
        "upstream_child",
        {"leaf": str(leaf), "key": str(key)},
        work / "upstream.stderr",
    )
    modes = []
    for name in MODES:
        home = Home(work / f"home-{name}")
        home.root.mkdir(parents=True)
        if name == "inspected":
            # The CA exists before the gateway starts: the client trusts what it signs.
            trust = ssl.create_default_context(cadata=ca_certificate(home.gateway_ca_dir))
        else:
            trust = ssl.create_default_context(cafile=str(ca))
        config = {
            "home": str(home.root),
            "inspect_tls": name == "inspected",
            "upstream_port": upstream.port,
            "upstream_ca": str(ca),
        }
        gateway = Child.start(f"{name} gateway", "gateway_child", config, work / f"{name}.stderr")
        modes.append(Mode(name, gateway, upstream.port, upstream.pid, trust, home.root))
    return upstream, modes


def alternate(modes: Sequence[Mode], times: int, fn: Callable[[Mode], Any]) -> dict[str, list[Any]]:
    """``fn`` on every mode in turn, ``times`` rounds, the order flipping each round."""
    results: dict[str, list[Any]] = {mode.name: [] for mode in modes}
    for i in range(times):
        for mode in modes if i % 2 == 0 else list(reversed(modes)):
            results[mode.name].append(fn(mode))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=200, help="size of the large body in MB")
    parser.add_argument("--repeat", type=int, default=3, help="large downloads per mode")
    parser.add_argument("--samples", type=int, default=50, help="small requests per mode")
    parser.add_argument(
        "--no-chunked", action="store_true", help="skip the chunked-upstream downloads"
    )
    parser.add_argument("--keep", action="store_true", help="keep the data roots")
    args = parser.parse_args()
    size = args.mb * MB
    work = scratch_dir("impyard-inspectbench-")
    # Three busy processes share this machine's CPUs: other load skews the comparison.
    idle = cpu_idle()
    began = time.perf_counter()
    upstream, modes = start_modes(work)
    try:
        for mode in modes:  # warm-up: the leaf is minted, contexts and threads exist
            for _ in range(3):
                small_requests(mode)
        warm = {mode.name: proc_status(mode.gateway.pid)["VmRSS"] for mode in modes}
        large: dict[tuple[str, bool], list[Download]] = {}
        for chunked in (False,) if args.no_chunked else (False, True):
            done = alternate(
                modes, args.repeat, functools.partial(download, size=size, chunked=chunked)
            )
            for name, results in done.items():
                large[(name, chunked)] = results
        small = alternate(modes, args.samples, small_requests)
        bodies = size * args.repeat * (1 if args.no_chunked else 2)
        checks = [f"{mode.name}: {journal_check(mode, bodies)}" for mode in modes]
        checks.append(f"inspected: {receipt_hashes(modes[0], size)}")
        final = {mode.name: proc_status(mode.gateway.pid) for mode in modes}
    finally:
        for child in (*(mode.gateway for mode in modes), upstream):
            child.stop()
    wall = time.perf_counter() - began
    report(args, size, modes, upstream, warm, final, large, small, checks, wall, idle)
    errors = {
        child.name: child.stderr_path.read_text().strip()
        for child in (*(mode.gateway for mode in modes), upstream)
    }
    for name, text in errors.items():
        if text:
            lines = text.splitlines()
            print(f"\n{name} stderr ({len(lines)} lines, last 20):")
            print("\n".join(lines[-20:]))
    if args.keep:
        print(f"\ndata roots kept in {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)


def report(
    args: argparse.Namespace,
    size: int,
    modes: Sequence[Mode],
    upstream: Child,
    warm: dict[str, int],
    final: dict[str, dict[str, int]],
    large: dict[tuple[str, bool], list[Download]],
    small: dict[str, list[Small]],
    checks: list[str],
    wall: float,
    idle: float,
) -> None:
    gateways = ", ".join(f"{mode.name} gateway {mode.gateway.pid}" for mode in modes)
    print(
        f"processes: client (this bench) {os.getpid()}, upstream {upstream.pid}, {gateways}; "
        f"{os.cpu_count()} CPUs ({idle:.0f}% idle just before); body {size / MB:.0f} MB x "
        f"{args.repeat} per mode; {args.samples} small-request samples per mode; wall {wall:.1f} s"
    )
    rows = []
    ratios: dict[bool, float] = {}
    growths: dict[bool, int] = {}
    for chunked in sorted({c for _, c in large}):
        direct = median([d.mbps for d in large[("direct", chunked)]])
        for mode in modes:
            runs = large[(mode.name, chunked)]
            mbps = median([d.mbps for d in runs])
            growth = max(d.growth for d in runs)
            ratio = mbps / direct
            if mode.name == "inspected":
                ratios[chunked], growths[chunked] = ratio, growth
            rows.append(
                (
                    mode.name,
                    "chunked" if chunked else "length",
                    f"{mbps:.0f}",
                    f"{min(d.mbps for d in runs):.0f}-{max(d.mbps for d in runs):.0f}",
                    f"{ratio:.2f}x",
                    f"{median([d.gateway_cpu for d in runs]) * 100:.0f}%",
                    f"{median([d.upstream_cpu for d in runs]) * 100:.0f}%",
                    f"{median([d.client_cpu for d in runs]) * 100:.0f}%",
                    f"{growth / MB:.1f}",
                    f"{max(d.rss_after for d in runs) / MB:.1f}",
                )
            )
    print_table(
        f"large download over HTTPS through the gateway ({size / MB:.0f} MB, "
        f"median of {args.repeat})",
        (
            "mode",
            "upstream framing",
            "MB/s",
            "range",
            "vs direct",
            "gateway CPU",
            "upstream CPU",
            "client CPU",
            "gateway RSS growth MB (max)",
            "gateway RSS after MB",
        ),
        rows,
    )
    latency_rows: list[tuple[str, ...]] = []
    for mode in modes:
        samples = small[mode.name]
        fresh, reuse = [x.fresh for x in samples], [x.reuse for x in samples]
        latency_rows.append(
            (
                mode.name,
                f"{median(fresh):.2f}",
                f"{p90(fresh):.2f}",
                f"{min(fresh):.2f}",
                stalled(fresh),
                f"{median(reuse):.2f}",
                f"{p90(reuse):.2f}",
                stalled(reuse),
            )
        )
    added = {
        kind: median([getattr(x, kind) for x in small["inspected"]])
        - median([getattr(x, kind) for x in small["direct"]])
        for kind in ("fresh", "reuse")
    }
    added["min"] = min(x.fresh for x in small["inspected"]) - min(x.fresh for x in small["direct"])
    latency_rows.append(
        (
            "inspected - direct",
            f"{added['fresh']:+.2f}",
            "",
            f"{added['min']:+.2f}",
            "",
            f"{added['reuse']:+.2f}",
            "",
            "",
        )
    )
    print_table(
        f"small GET (1 KB) latency in ms, {args.samples} sequential samples per mode",
        (
            "mode",
            "fresh conn median",
            "fresh p90",
            "fresh min",
            f"fresh >= {STALL_MS:.0f} ms",
            "same conn median",
            "same conn p90",
            f"same conn >= {STALL_MS:.0f} ms",
        ),
        latency_rows,
    )
    targets = []
    for chunked, ratio in sorted(ratios.items()):
        framing = "chunked" if chunked else "length"
        targets.append(
            (
                f"throughput inspected / direct ({framing})",
                f"{ratio:.2f}x",
                f">= {THROUGHPUT_RATIO}x",
                "pass" if ratio >= THROUGHPUT_RATIO else "FAIL",
            )
        )
    for chunked, growth in sorted(growths.items()):
        framing = "chunked" if chunked else "length"
        targets.append(
            (
                f"inspected gateway RSS growth per download ({framing})",
                f"{growth / MB:.1f} MB",
                f"< {RSS_GROWTH_MB:.0f} MB",
                "pass" if growth / MB < RSS_GROWTH_MB else "FAIL",
            )
        )
    targets.append(
        (
            "added latency, fresh connection (median)",
            f"{added['fresh']:+.2f} ms",
            "-",
            "-",
        )
    )
    print_table("targets", ("metric", "value", "target", "result"), targets)
    print()
    for mode in modes:
        status = final[mode.name]
        print(
            f"{mode.name} gateway RSS: {warm[mode.name] / MB:.1f} MB after warm-up, "
            f"{status['VmRSS'] / MB:.1f} MB at the end"
        )
    hwm = all(d.hwm for runs in large.values() for d in runs)
    print(
        "gateway peaks: "
        + ("VmHWM reset before each download" if hwm else "10 ms VmRSS samples (no reset)")
    )
    for line in checks:
        print(line)


if __name__ == "__main__":
    main()
