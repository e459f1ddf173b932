"""Create sockets inside another process's network namespace (the box's).

A socket keeps the namespace it was created in for its whole life, so the
host can bind a listener on the box's own loopback and then accept() on it
from any host thread. The box then reaches the gateway at 127.0.0.1:<port>
without any interface besides ``lo`` and without a route anywhere else.

setns(2) switches only the calling thread, so the switch happens on a
dedicated short-lived thread: if switching back ever failed, that thread
ends and no other host work runs in the box's namespace.
"""

from __future__ import annotations

import ctypes
import logging
import os
import socket
import threading
from collections.abc import Callable
from typing import TypeVar

from impyard.common.libc import syscall
from impyard.gateway.errors import GatewayError

log = logging.getLogger(__name__)

CLONE_NEWNET = 0x40000000
_T = TypeVar("_T")


def _setns(fd: int) -> None:
    err = syscall("setns", (ctypes.c_int, ctypes.c_int), fd, CLONE_NEWNET)
    if err:
        raise OSError(err, f"setns: {os.strerror(err)}")


def _own_netns_path() -> str:
    # The thread's own namespace, not the process's: other threads are irrelevant here.
    if os.path.exists("/proc/thread-self/ns/net"):
        return "/proc/thread-self/ns/net"
    return f"/proc/self/task/{threading.get_native_id()}/ns/net"


def host_proc() -> str:
    """Where the host's /proc is: a node agent runs in a container of its own, with the
    host's /proc mounted beside its own (``IMPYARD_HOST_PROC``), and a box's pid is the
    host's."""
    return os.environ.get("IMPYARD_HOST_PROC", "/proc")


def run_in_netns(pid: int, fn: Callable[[], _T], *, timeout: float = 10.0) -> _T:
    """Run ``fn`` on a fresh thread inside the network namespace of ``pid``; return its result."""
    result: list[_T] = []
    failure: list[BaseException] = []

    def worker() -> None:
        try:
            own = os.open(_own_netns_path(), os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            failure.append(exc)
            return
        try:
            try:
                target = os.open(f"{host_proc()}/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
            except OSError as exc:
                failure.append(exc)
                return
            try:
                _setns(target)
            except OSError as exc:
                failure.append(exc)
                return
            finally:
                os.close(target)
            try:
                result.append(fn())
            except BaseException as exc:
                failure.append(exc)
            finally:
                try:
                    _setns(own)
                except OSError:
                    # The thread is about to end anyway; nothing else will run on it.
                    log.exception("could not return to the host netns; thread ends")
        finally:
            os.close(own)

    thread = threading.Thread(target=worker, name=f"netns-{pid}", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise GatewayError(f"gateway: entering the network namespace of pid {pid} timed out")
    if failure:
        exc = failure[0]
        if isinstance(exc, GatewayError):
            raise exc
        raise GatewayError(
            f"gateway: cannot work in the network namespace of pid {pid}: {exc}"
        ) from exc
    return result[0]


def listen_in_netns(
    pid: int, host: str = "127.0.0.1", port: int = 3128, *, backlog: int = 128
) -> socket.socket:
    """A listening TCP socket bound to ``host:port`` inside the netns of ``pid``."""

    def bind() -> socket.socket:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
            sock.listen(backlog)
        except BaseException:
            sock.close()
            raise
        return sock

    return run_in_netns(pid, bind)


def connect_in_netns(pid: int, host: str, port: int, *, timeout: float = 10.0) -> socket.socket:
    """A TCP connection made from inside the netns of ``pid`` (tests and health checks)."""

    def connect() -> socket.socket:
        return socket.create_connection((host, port), timeout=timeout)

    return run_in_netns(pid, connect, timeout=timeout + 5)
