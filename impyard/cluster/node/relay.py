"""The box's gateway, as the box on a node sees it: a listener on the loopback of the box's
network namespace (made the way a local run's gateway makes its own), each connection
relayed to the control plane, where the run's gateway (its rules, budgets, secrets and
journal) serves it. The node judges nothing and holds no secret."""

from __future__ import annotations

import contextlib
import logging
import socket
import threading

from impyard.cluster.node.client import ClusterClient
from impyard.gateway.wiring.netns import listen_in_netns

log = logging.getLogger(__name__)


class Relay:
    def __init__(self, client: ClusterClient, run_id: str, token: str) -> None:
        self.client = client
        self.run_id = run_id
        self.token = token
        self._listener: socket.socket | None = None
        self._stop = threading.Event()
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()

    def attach(self, pid: int, port: int) -> None:
        """Listen inside the box (``pid``'s namespace) and start relaying."""
        listener = listen_in_netns(pid, "127.0.0.1", port)
        listener.settimeout(0.5)
        self._listener = listener
        threading.Thread(target=self._accept, name=f"relay-{self.run_id}", daemon=True).start()

    def close(self) -> None:
        self._stop.set()
        if self._listener is not None:
            self._listener.close()
        with self._lock:
            for sock in list(self._open):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def _accept(self) -> None:
        assert self._listener is not None
        while not self._stop.is_set():
            try:
                box_side, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                if self._stop.is_set():
                    return
                self._stop.wait(0.1)
                continue
            threading.Thread(
                target=self._serve, args=(box_side,), name="relay-conn", daemon=True
            ).start()

    def _serve(self, box_side: socket.socket) -> None:
        try:
            plane_side = self.client.relay(self.run_id, self.token)
        except Exception as exc:  # the box sees its connection closed: nothing else goes out
            log.warning("run %s: relay refused: %s", self.run_id, exc)
            box_side.close()
            return
        box_side.setblocking(True)
        for sock in (box_side, plane_side):
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self._lock:
            self._open |= {box_side, plane_side}
        back = threading.Thread(target=_pump, args=(plane_side, box_side), daemon=True)
        back.start()
        _pump(box_side, plane_side)
        back.join()
        with self._lock:
            self._open -= {box_side, plane_side}
        box_side.close()
        plane_side.close()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    """Bytes from ``source`` to ``sink`` until ``source`` ends; then end ``sink``'s writing."""
    try:
        while data := source.recv(1 << 16):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)
