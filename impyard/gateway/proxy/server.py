"""One run's gateway: its listener in the box, the threads serving it, and its journal lines.

The listening socket lives in the box's network namespace (see ``netns``);
every thread that accepts, judges and forwards runs in the host's namespace,
so upstream connections leave from the host and nothing in the box has any
other way out. Each connection gets its own thread, bounded by a semaphore.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from typing import Any

from impyard.common.names import check_imp_name
from impyard.gateway.errors import GatewayError
from impyard.gateway.guard.budget import DailyCounter, RunBudget
from impyard.gateway.guard.outcome import Record
from impyard.gateway.guard.upstream import upstream_context
from impyard.gateway.provenance.archive import Archive
from impyard.gateway.provenance.archive_intake import RunArchive
from impyard.gateway.provenance.receipts import ReceiptLog
from impyard.gateway.proxy.control import ControlRate, RunControl
from impyard.gateway.proxy.framing import CHUNK
from impyard.gateway.proxy.handler import GatewayHandler
from impyard.gateway.wiring.boxside import proxy_env
from impyard.gateway.wiring.netns import listen_in_netns
from impyard.home import Home
from impyard.journal.log import Journal
from impyard.policy.models import GatewayPolicy

log = logging.getLogger(__name__)

#: How long, and for how many bytes, a closing connection drains what the box still sends.
LINGER_SECONDS = 2.0
LINGER_BYTES = 64 * 1024 * 1024


def linger(conn: socket.socket) -> None:
    """Close gently: stop writing, then read and drop what the box is still sending, for at
    most LINGER_SECONDS and LINGER_BYTES. A refusal may come before the box has sent its
    whole request (an upload over budget is refused unread); closing with unread bytes
    makes the kernel send a reset, which can destroy the answer before the box reads it."""
    deadline = time.monotonic() + LINGER_SECONDS
    drained = 0
    with contextlib.suppress(OSError):
        conn.shutdown(socket.SHUT_WR)
        while drained < LINGER_BYTES:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            conn.settimeout(left)
            data = conn.recv(CHUNK)
            if not data:
                break
            drained += len(data)


class Gateway:
    """One run's gateway. ``start`` → ``attach(pid)`` → ``proxy_env()`` for the box → ``close``."""

    def __init__(
        self,
        policy: GatewayPolicy,
        *,
        home: Home,
        imp: str,
        run_id: str,
        journal: Journal,
        control: RunControl | None = None,
        upstream_ca_file: str | None = None,
        max_workers: int = 64,
        client_timeout: float = 60.0,
        upstream_timeout: float = 120.0,
        tunnel_idle_timeout: float = 300.0,
    ) -> None:
        self.policy = policy
        self.home = home
        self.imp = imp
        self.run_id = run_id
        self.journal = journal
        self.budget = RunBudget(policy.budget, DailyCounter(home, imp))
        #: A fetch receipt for every response relayed to the box.
        self.receipts = ReceiptLog(home.run_receipts(run_id))
        #: The source archive and what this run stored in it (None: the archive is off).
        self.archive = (
            RunArchive(Archive(home.archive_dir), policy.archive)
            if policy.archive.enabled
            else None
        )
        #: The run's answers to its box's control requests (None: nothing to check).
        self.control = control
        self.control_rate = ControlRate(policy.budget.control_requests_per_minute)
        self.upstream_ca_file = upstream_ca_file
        self._upstream_tls: ssl.SSLContext | None = None
        self.client_timeout = client_timeout
        self.upstream_timeout = upstream_timeout
        self.tunnel_idle_timeout = tunnel_idle_timeout
        self._slots = threading.BoundedSemaphore(max_workers)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._accept_thread: threading.Thread | None = None
        self._active: set[socket.socket] = set()
        self._workers: set[threading.Thread] = set()
        self._closed = False

    @classmethod
    def start(
        cls,
        policy: GatewayPolicy,
        *,
        home: Home,
        imp: str,
        run_id: str,
        journal: Journal,
        **options: Any,
    ) -> Gateway:
        """Prepare a run's gateway; it serves nothing until ``attach``."""
        check_imp_name(imp)  # it names the daily counter's directory
        gateway = cls(policy, home=home, imp=imp, run_id=run_id, journal=journal, **options)
        if policy.enabled:
            try:
                home.gateway_dir.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise GatewayError(f"gateway: cannot create {home.gateway_dir}: {exc}") from exc
        return gateway

    @property
    def upstream_tls(self) -> ssl.SSLContext:
        """Verification of upstream TLS (system roots + the owner's extra CA), built once."""
        if self._upstream_tls is None:
            self._upstream_tls = upstream_context(self.upstream_ca_file)
        return self._upstream_tls

    @property
    def port(self) -> int:
        return self.policy.port

    @property
    def serving(self) -> bool:
        return self._listener is not None and not self._stop.is_set()

    @property
    def stopping(self) -> bool:
        """Set by close(); long-lived work (tunnels) checks it to end promptly."""
        return self._stop.is_set()

    def attach(self, pid: int) -> None:
        """Bind the listener on the loopback of ``pid``'s netns and start serving (fail closed)."""
        if not self.policy.enabled:
            return
        if self._closed:
            raise GatewayError("gateway: attach after close")
        try:
            listener = listen_in_netns(pid, "127.0.0.1", self.policy.port)
        except GatewayError as exc:
            raise GatewayError(
                f"gateway for run {self.run_id}: cannot listen on 127.0.0.1:{self.policy.port} "
                f"in the box (pid {pid}): {exc}"
            ) from exc
        self.serve(listener)

    def serve(self, listener: socket.socket) -> None:
        """Serve on an already-listening socket (``attach`` makes one inside the box)."""
        with self._lock:
            if self._listener is not None or self._closed:
                listener.close()
                raise GatewayError("gateway: already serving or closed")
            listener.settimeout(0.5)  # the accept loop wakes to notice close()
            self._listener = listener
            self._accept_thread = threading.Thread(
                target=self._accept_loop, name=f"gateway-{self.run_id}", daemon=True
            )
            self._accept_thread.start()

    def proxy_env(self) -> dict[str, str]:
        """Environment for the box; empty when the gateway is disabled."""
        return proxy_env(self.policy.port) if self.policy.enabled else {}

    def close(self) -> None:
        """Stop accepting, cut open connections and tunnels, wait briefly for workers (which
        write their journal lines before they end)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._stop.set()
            listener, self._listener = self._listener, None
            active = list(self._active)
            workers = list(self._workers)
            accept_thread = self._accept_thread
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        for conn in active:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        if accept_thread is not None:
            accept_thread.join(5)
        for worker in workers:
            worker.join(5)

    def __enter__(self) -> Gateway:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def tracked(self, sock: socket.socket) -> Iterator[socket.socket]:
        """Cut ``sock`` on close() too: an upstream that never answers must not hold a
        worker (and the run's end) until its read timeout."""
        with self._lock:
            self._active.add(sock)
        try:
            yield sock
        finally:
            with self._lock:
                self._active.discard(sock)

    def record(self, rec: Record) -> None:
        fields: dict[str, Any] = {
            "run": self.run_id,
            "imp": self.imp,
            "method": rec.method,
            "host": rec.host,
            "port": rec.port,
            "path": rec.path,
            "route": rec.route,
            "decision": rec.decision,
            "rule": rec.rule,
            "status": rec.status,
            "bytes": rec.bytes,
            "request_bytes": rec.request_bytes,
            "receipt": rec.receipt,
            "duration_ms": round((time.monotonic() - rec.started) * 1000, 1),
        }
        if rec.reason is not None:
            fields["reason"] = rec.reason
        try:
            self.journal.record("gateway.request", **fields)
        except OSError:
            # The request is already answered; a lost line is logged, not a dropped connection.
            log.exception("gateway %s: journal write failed", self.run_id)

    def _accept_loop(self) -> None:
        listener = self._listener
        assert listener is not None
        while not self._stop.is_set():
            # A slot first: past max_workers, connections wait in the backlog, not in threads.
            if not self._slots.acquire(timeout=0.5):
                continue
            try:
                conn, _addr = listener.accept()
            except TimeoutError:
                self._slots.release()
                continue
            except OSError as exc:
                self._slots.release()
                if self._stop.is_set():
                    break
                log.warning("gateway %s: accept failed: %s", self.run_id, exc)
                self._stop.wait(0.1)  # e.g. EMFILE: back off instead of spinning
                continue
            if not self._start_worker(conn):
                break

    def adopt(self, conn: socket.socket, wait: float = 30.0) -> bool:
        """Serve a connection made elsewhere: a box on a cluster node, relayed by its node
        agent. False (``conn`` closed) when the gateway is closed or no worker came free."""
        if self._closed or not self._slots.acquire(timeout=wait):
            conn.close()
            return False
        return self._start_worker(conn)

    def _start_worker(self, conn: socket.socket) -> bool:
        """Serve ``conn`` on a worker holding a slot; False once the gateway closed."""
        # Answers go out in several small writes (head, body, TLS records): with Nagle
        # on, each later one waits ~40 ms for the client's delayed ACK.
        with contextlib.suppress(OSError):
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        thread = threading.Thread(
            target=self._serve_connection, args=(conn,), name="gateway-conn", daemon=True
        )
        with self._lock:
            if self._closed:
                conn.close()
                self._slots.release()
                return False
            self._active.add(conn)
            self._workers.add(thread)
        thread.start()
        return True

    def _serve_connection(self, conn: socket.socket) -> None:
        try:
            conn.settimeout(self.client_timeout)
            GatewayHandler(conn, self)
        except Exception:
            log.exception("gateway %s: connection failed", self.run_id)
        finally:
            if not self._stop.is_set():
                linger(conn)
            with contextlib.suppress(OSError):
                conn.close()
            with self._lock:
                self._active.discard(conn)
                self._workers.discard(threading.current_thread())
            self._slots.release()
